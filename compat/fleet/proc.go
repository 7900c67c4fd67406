package fleet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dranode/dranode/tools/envtest/childproc"
)

// Process is a driver binary running in a process group of its own (its
// plugins with it), its output appended to a log file: the restartable
// child the other harnesses use too.
type Process = childproc.Restartable

// ErrExited is returned when a process ended while it was waited for.
var ErrExited = childproc.ErrExited

// Usage is a process's CPU time so far and its resident memory now.
type Usage struct {
	// CPU is the time its threads have run, to the nanosecond (the
	// scheduler's own count, /proc/<pid>/task/*/schedstat). /proc/<pid>/stat
	// counts 10-ms ticks, and a node's agent at rest runs a few
	// milliseconds a minute: the ticks did not tell the drivers apart.
	CPU time.Duration
	// RSS is its resident memory (VmRSS), the binary's mapped pages
	// included: those are clean, shared with every process of the same
	// binary and reclaimable, and were most of an idle plugin's RSS.
	RSS int64 // bytes
	// Anon is the resident memory only it holds (RssAnon): its heap and
	// stacks, what running one more process costs.
	Anon int64 // bytes
}

// ReadUsage reads pid's CPU time from the schedstat of each of its threads
// and VmRSS and RssAnon from /proc/<pid>/status. A thread that exited took
// its CPU time with it; Go programs keep their threads.
func ReadUsage(pid int) (Usage, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	tasks, err := filepath.Glob(filepath.Join(dir, "task", "*", "schedstat"))
	if err != nil || len(tasks) == 0 {
		return Usage{}, fmt.Errorf("usage of %d: no threads in %s (%v)", pid, dir, err)
	}
	var u Usage
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited meanwhile
		}
		if err != nil {
			return Usage{}, fmt.Errorf("usage of %d: %w", pid, err)
		}
		fields := strings.Fields(string(data))
		if len(fields) == 0 {
			return Usage{}, fmt.Errorf("usage of %d: empty %s", pid, t)
		}
		ns, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return Usage{}, fmt.Errorf("usage of %d: %s: %w", pid, t, err)
		}
		u.CPU += time.Duration(ns)
	}
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return Usage{}, fmt.Errorf("usage of %d: %w", pid, err)
	}
	u.RSS, u.Anon = -1, -1
	for _, line := range strings.Split(string(status), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "RssAnon") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			return Usage{}, fmt.Errorf("usage of %d: %s %q: %w", pid, name, v, err)
		}
		if name == "VmRSS" {
			u.RSS = kb * 1024
		} else {
			u.Anon = kb * 1024
		}
	}
	if u.RSS < 0 || u.Anon < 0 {
		return Usage{}, fmt.Errorf("usage of %d: VmRSS or RssAnon missing from %s/status", pid, dir)
	}
	return u, nil
}

// Children lists the processes whose parent is pid.
func Children(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out, nil
}
