package fleet

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a driver binary running in a process group of its own (its
// plugins with it), its output appended to a log file.
type Process struct {
	Path, LogPath string
	Args          []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exit   chan struct{}
	groups []int
}

// ErrExited is returned when a process ended while it was waited for.
var ErrExited = errors.New("process exited")

// Start runs the binary.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s already running", p.Path)
	}
	log, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("log of %s: %w", p.Path, err)
	}
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Own group, killed by Stop: a driver's plugin children must not
	// outlive the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", p.Path, err)
	}
	exit := make(chan struct{})
	p.cmd, p.exit = cmd, exit
	p.groups = append(p.groups, cmd.Process.Pid)
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(exit)
	}()
	return nil
}

// PID is the running process's ID, 0 when it is not running.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited is closed when the process started last has ended.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// Stop sends SIGTERM, as the kubelet does to a pod, waits up to 20 s for
// the process, then kills its group and the groups of earlier starts.
func (p *Process) Stop() {
	p.mu.Lock()
	cmd, exit, groups := p.cmd, p.exit, p.groups
	p.cmd, p.groups = nil, nil
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exit:
		case <-time.After(20 * time.Second):
		}
	}
	for _, g := range groups {
		_ = syscall.Kill(-g, syscall.SIGKILL)
	}
	if cmd != nil {
		<-exit
	}
}

// LogTail is the last n lines of the process's output.
func (p *Process) LogTail(n int) string {
	data, _ := os.ReadFile(p.LogPath)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

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
