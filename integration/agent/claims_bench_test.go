package agent_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dranode/dranode/agent"
	"github.com/dranode/dranode/tools/envtest"
)

// cpuTime is the user and system CPU time of pid (0: this process).
func cpuTime(b *testing.B, pid int) time.Duration {
	b.Helper()
	if pid == 0 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name's last ")": utime and stime are the
	// 12th and 13th, in clock ticks of 10 ms.
	f := strings.Fields(string(data)[strings.LastIndex(string(data), ")")+1:])
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// BenchmarkAPIClaimSourceGet is the claim lookup of every Prepare (the
// agent's own claim source, NewAPIClaimSource: a quorum GET) against a
// real kube-apiserver and etcd, with client-go's defaults (which negotiate
// protobuf for built-in types) and with JSON forced: latency, this
// client's allocations, and the CPU one GET costs this process, the API
// server and etcd (in µs per GET, from /proc over the whole run). Protobuf
// runs first, so a warm-up advantage would go to JSON.
func BenchmarkAPIClaimSourceGet(b *testing.B) {
	env := &envtest.Environment{}
	restCfg := envtest.StartT(b, env)
	ctx := context.Background()
	created := createAllocated(b, kubernetes.NewForConfigOrDie(restCfg), allocated("default", "bench-get", "gpu-0"))
	pids := env.PIDs()
	for _, tc := range []struct{ name, contentType string }{
		{"default", ""}, // client-go v0.37: Accept protobuf, then JSON
		{"json", "application/json"},
	} {
		b.Run("content="+tc.name, func(b *testing.B) {
			cfg := rest.CopyConfig(restCfg)
			cfg.QPS, cfg.Burst = 1e6, 1e6 // measure the GET, not the limiter
			cfg.ContentType = tc.contentType
			src, err := agent.NewAPIClaimSource(cfg)
			if err != nil {
				b.Fatal(err)
			}
			get := func() {
				got, err := src.GetClaim(ctx, "default", "bench-get")
				if err != nil {
					b.Fatal(err)
				}
				if got.Status.Allocation == nil || got.UID != created.UID {
					b.Fatalf("read back %s allocated %v", got.UID, got.Status.Allocation != nil)
				}
			}
			get() // connection and discovery outside the measurement
			self, api, etcd := cpuTime(b, 0), cpuTime(b, pids["kube-apiserver"]), cpuTime(b, pids["etcd"])
			b.ReportAllocs()
			for b.Loop() {
				get()
			}
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
			b.ReportMetric(per(cpuTime(b, 0)-self), "client-cpu-µs/op")
			b.ReportMetric(per(cpuTime(b, pids["kube-apiserver"])-api), "apiserver-cpu-µs/op")
			b.ReportMetric(per(cpuTime(b, pids["etcd"])-etcd), "etcd-cpu-µs/op")
		})
	}
}
