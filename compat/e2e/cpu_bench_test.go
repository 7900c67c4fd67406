package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
// 100 on Linux: 10 ms resolution, enough summed over a benchmark).
const clockTick = 10 * time.Millisecond

// processCPU is the CPU time (user and system) pid has used.
func processCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("cpu of %d: %w", pid, err)
	}
	// The command name may hold spaces and parentheses: fields start after
	// the last ")", with field 3 (state) first; utime and stime are
	// fields 14 and 15.
	i := strings.LastIndex(string(data), ") ")
	var f []string
	if i >= 0 {
		f = strings.Fields(string(data)[i+2:])
	}
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu of %d: unexpected /proc stat %q", pid, data)
	}
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cpu of %d: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * clockTick, nil
}

// selfCPU is this process's CPU time: the kubelet's DRA and plugin
// managers run in it, and the benchmark's goroutines.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuShares accumulates, over the timed parts of a benchmark, the CPU
// time of every process taking part, to show where a prepare's work is
// done on the shared cores.
type cpuShares struct {
	n     *node
	total map[string]time.Duration
	start map[string]time.Duration
}

var cpuParts = []string{"agent", "plugin", "kubelet", "apiserver", "etcd"}

func newCPUShares(n *node) *cpuShares {
	return &cpuShares{n: n, total: map[string]time.Duration{}}
}

func (c *cpuShares) sample(b *testing.B) map[string]time.Duration {
	b.Helper()
	s := map[string]time.Duration{"kubelet": selfCPU()}
	add := func(part string, pid int) {
		d, err := processCPU(pid)
		if err != nil {
			b.Fatal(err)
		}
		s[part] += d
	}
	add("agent", c.n.agent.PID())
	plugins, err := c.n.agent.PluginPIDs()
	if err != nil {
		b.Fatal(err)
	}
	for _, pid := range plugins {
		add("plugin", pid)
	}
	pids := cluster.Env.PIDs()
	add("apiserver", pids["kube-apiserver"])
	add("etcd", pids["etcd"])
	return s
}

// begin and end bracket one timed part.
func (c *cpuShares) begin(b *testing.B) { c.start = c.sample(b) }

func (c *cpuShares) end(b *testing.B) {
	for k, v := range c.sample(b) {
		c.total[k] += v - c.start[k]
	}
}

// report gives each process's CPU milliseconds per claim prepared.
func (c *cpuShares) report(b *testing.B, claims int) {
	for _, part := range cpuParts {
		b.ReportMetric(float64(c.total[part])/float64(time.Millisecond)/float64(claims), part+"-cpu-ms/claim")
	}
}
