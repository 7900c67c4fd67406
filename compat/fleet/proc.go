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

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// Usage is a process's CPU time so far and its resident memory now.
type Usage struct {
	CPU time.Duration
	RSS int64 // bytes
}

// ReadUsage reads pid's utime+stime from /proc/<pid>/stat and VmRSS from
// /proc/<pid>/status.
func ReadUsage(pid int) (Usage, error) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return Usage{}, fmt.Errorf("usage of %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces; fields count from the
	// last ')'.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return Usage{}, fmt.Errorf("usage of %d: short stat %q", pid, s)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(fields[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return Usage{}, fmt.Errorf("usage of %d: %w", pid, err)
	}
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return Usage{}, fmt.Errorf("usage of %d: %w", pid, err)
	}
	var rss int64 = -1
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return Usage{}, fmt.Errorf("usage of %d: VmRSS %q: %w", pid, v, err)
			}
			rss = kb * 1024
		}
	}
	if rss < 0 {
		return Usage{}, fmt.Errorf("usage of %d: no VmRSS", pid)
	}
	return Usage{CPU: time.Duration(utime+stime) * time.Second / clockTicks, RSS: rss}, nil
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
