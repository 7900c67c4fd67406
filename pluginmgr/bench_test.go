package pluginmgr_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/pluginmgr/internal/testdriver"
)

// BenchmarkStartup measures launch to first inventory: checksum, process
// start, go-plugin handshake with AutoMTLS, Configure, Info and the first
// WatchDevices message, then a clean Close (not timed).
func BenchmarkStartup(b *testing.B) {
	cfg := testConfig(b, nil)
	b.ReportAllocs()
	for b.Loop() {
		p, err := pluginmgr.Launch(context.Background(), cfg, quietOptions())
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := p.WaitInventory(context.Background(), 0); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := p.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkPrepare compares a one-claim Prepare through the host, go-plugin
// and the plugin process with the same driver called in-process; the
// difference is the protocol's overhead.
//
// "plugin" makes the calls back to back, with both processes' threads
// still awake from the last one; "plugin-after-idle" waits idleBeforeCall
// before each (untimed), as the agent's calls come when the kubelet
// prepares one pod after another, so that each call wakes two idle
// processes. "grpc-after-idle" is plain gRPC after the same wait (no
// go-plugin, TLS or driver), "echo-after-idle" the floor of both: four
// bytes sent to a child process over a Unix socket and echoed back.
func BenchmarkPrepare(b *testing.B) {
	claims := []pluginmgr.Claim{claimFor("bench", "dev0")}
	ctx := context.Background()
	b.Run("plugin", func(b *testing.B) {
		p := launch(b, testConfig(b, nil), quietOptions())
		b.ReportAllocs()
		cpu := startPeerCPU(b, p.Status().PID)
		for b.Loop() {
			res, err := p.Prepare(ctx, claims)
			if err != nil || res[0].Err != nil {
				b.Fatal(err, res)
			}
		}
		cpu.report(b)
	})
	b.Run("plugin-after-idle", func(b *testing.B) {
		p := launch(b, testConfig(b, nil), quietOptions())
		b.ReportAllocs()
		wait := idleDuration(b)
		cpu := startPeerCPU(b, p.Status().PID)
		for b.Loop() {
			idle(b, wait)
			res, err := p.Prepare(ctx, claims)
			if err != nil || res[0].Err != nil {
				b.Fatal(err, res)
			}
		}
		cpu.report(b)
	})
	b.Run("grpc-after-idle", func(b *testing.B) {
		conn, pid := startPeer(b, grpcModeEnv)
		cc, err := grpc.NewClient("passthrough:peer",
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return conn, nil }))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cc.Close() })
		health := healthpb.NewHealthClient(cc)
		// The first call connects; the peer has started once it answers.
		if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		wait := idleDuration(b)
		cpu := startPeerCPU(b, pid)
		for b.Loop() {
			idle(b, wait)
			if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				b.Fatal(err)
			}
		}
		cpu.report(b)
	})
	b.Run("echo-after-idle", func(b *testing.B) {
		conn, pid := startPeer(b, echoModeEnv)
		buf := make([]byte, 4)
		echo := func() {
			if _, err := conn.Write([]byte("ping")); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(conn, buf); err != nil {
				b.Fatal(err)
			}
		}
		echo() // the peer has started once it answers
		wait := idleDuration(b)
		cpu := startPeerCPU(b, pid)
		for b.Loop() {
			idle(b, wait)
			echo()
		}
		cpu.report(b)
	})
	b.Run("direct", func(b *testing.B) {
		d := &testdriver.Driver{}
		if err := d.Configure(ctx, "node-1", nil); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			res, err := d.Prepare(ctx, claims)
			if err != nil || res[0].Err != nil {
				b.Fatal(err, res)
			}
		}
	})
}

// idleBeforeCall is longer than the Go runtime keeps an idle process's
// threads spinning, shorter than the agent's gap between two pods'
// prepares on a loaded node (compat/drabench: 5 to 12 ms).
// PLUGINMGR_BENCH_IDLE (a Go duration) sets another, to see how the cost
// of a call grows with the idle before it (BENCHMARKS.md).
const idleBeforeCall = 5 * time.Millisecond

// idle leaves both processes without work for d, untimed.
func idle(b *testing.B, d time.Duration) {
	b.StopTimer()
	time.Sleep(d)
	b.StartTimer()
}

// idleDuration is idleBeforeCall, or PLUGINMGR_BENCH_IDLE when set.
func idleDuration(b *testing.B) time.Duration {
	v := os.Getenv("PLUGINMGR_BENCH_IDLE")
	if v == "" {
		return idleBeforeCall
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		b.Fatalf("PLUGINMGR_BENCH_IDLE=%q: want a duration of zero or more, such as 500us or 2ms", v)
	}
	return d
}

// The test binary runs as the peer process of echo-after-idle when
// echoModeEnv is set (it echoes what it reads) and of grpc-after-idle when
// grpcModeEnv is set (it serves gRPC's health service, the smallest unary
// call gRPC has), on the connection it inherits as file descriptor 3.
const (
	echoModeEnv = "PLUGINMGR_TEST_ECHO_PEER"
	grpcModeEnv = "PLUGINMGR_TEST_GRPC_PEER"
)

// runPeer is the peer process: it serves its inherited connection until the
// benchmark closes it, then exits.
func runPeer(mode string) {
	conn, err := net.FileConn(os.NewFile(3, "peer"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	switch mode {
	case echoModeEnv:
		_, _ = io.Copy(conn, conn)
	case grpcModeEnv:
		s := grpc.NewServer()
		healthpb.RegisterHealthServer(s, health.NewServer())
		l := &oneConnListener{conns: make(chan net.Conn, 1), done: make(chan struct{})}
		l.conns <- &closeNotifyConn{Conn: conn, closed: l.done}
		_ = s.Serve(l) // ends when the connection does
	}
	os.Exit(0)
}

// oneConnListener hands grpc.Server one connection and then blocks in
// Accept until that connection is closed, which ends Serve.
type oneConnListener struct {
	conns chan net.Conn
	done  chan struct{}
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return &net.UnixAddr{Name: "peer", Net: "unix"} }

// closeNotifyConn closes closed when the server closes the connection.
type closeNotifyConn struct {
	net.Conn
	closed chan struct{}
	once   sync.Once
}

func (c *closeNotifyConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// startPeer starts the test binary as a peer process in the given mode,
// connected to the benchmark by a Unix socket pair, and returns the
// benchmark's end and the peer's PID.
func startPeer(b *testing.B, mode string) (net.Conn, int) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "bench"), os.NewFile(uintptr(fds[1]), "peer")
	defer theirs.Close()
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), mode+"=1")
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		conn.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		conn.Close() // the peer's loop ends, and so does the peer
		if err := cmd.Wait(); err != nil {
			b.Errorf("peer process: %v", err)
		}
	})
	return conn, cmd.Process.Pid
}

// peerCPU is the CPU time a peer process spent during a benchmark loop,
// reported per call: it tells whether a cold call is slow because the peer
// waits (wake-ups) or because it works (cold caches).
type peerCPU struct {
	pid    int
	before time.Duration
}

func startPeerCPU(b *testing.B, pid int) peerCPU {
	return peerCPU{pid: pid, before: processCPU(b, pid)}
}

func (c peerCPU) report(b *testing.B) {
	spent := processCPU(b, c.pid) - c.before
	b.ReportMetric(float64(spent.Microseconds())/float64(b.N), "peer-cpu-µs/op")
}

// processCPU sums the time on CPU of every thread of pid, in nanoseconds
// from /proc/PID/task/*/schedstat (/proc/PID/stat counts 10-ms ticks, too
// coarse for a few hundred calls). Go processes keep their threads, so none
// of the time goes missing with an exited thread.
func processCPU(b *testing.B, pid int) time.Duration {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		b.Fatalf("threads of process %d: %v", pid, err)
	}
	var sum time.Duration
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			b.Fatal(err)
		}
		var onCPU int64
		if _, err := fmt.Sscan(string(data), &onCPU); err != nil {
			b.Fatalf("%s: %v", t, err)
		}
		sum += time.Duration(onCPU)
	}
	return sum
}
