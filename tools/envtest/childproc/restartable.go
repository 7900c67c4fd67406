package childproc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Restartable is a binary (the agent, a DRA kubelet plugin) run as a child
// in a process group of its own, with its output appended to a log file,
// for tests that start, kill and restart it. Unlike Start's children it
// gets no parent-death signal: a test kills it, or Stop does.
type Restartable struct {
	Path    string
	Args    []string
	LogPath string
	// Output, when set, also receives the process's output.
	Output io.Writer
	// Env is added to the environment the child inherits: the test's
	// own, less every DRANODE_ variable. Those configure dranode-agent
	// (one per key) or this repository's test tools
	// (DRANODE_CONTROLPLANE_BIN, DRANODE_NODE_BIN), and the agent refuses
	// a DRANODE_ variable that is none of its keys: as a pod gets only the
	// variables its spec names, a child gets only the DRANODE_ variables
	// a test gives it here.
	Env []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exit   chan struct{}
	err    error
	groups []int // the process group of every start, for Stop
}

// ErrExited is returned when a Restartable ended while a test waited for it
// to do something.
var ErrExited = errors.New("process exited")

// Start runs the binary with its arguments; output is appended to LogPath.
func (p *Restartable) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s already running", p.Path)
	}
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("log of %s: %w", p.Path, err)
	}
	var out io.Writer = logFile
	if p.Output != nil {
		out = io.MultiWriter(logFile, p.Output)
	}
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = append(inheritedEnv(), p.Env...)
	cmd.Stdout, cmd.Stderr = out, out
	// Own process group: children it starts (an agent's plugins) must not
	// outlive the test when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", p.Path, err)
	}
	exit := make(chan struct{})
	p.cmd, p.exit, p.err = cmd, exit, nil
	p.groups = append(p.groups, cmd.Process.Pid)
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(exit)
	}()
	return nil
}

// PID is the running process's ID (0 when not running).
func (p *Restartable) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited is closed when the current process has ended (nil before Start).
func (p *Restartable) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// ExitError is how the last process ended (nil: status 0 or running).
func (p *Restartable) ExitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Kill ends the process alone with SIGKILL, a crash, and waits for it; its
// children notice the broken connection themselves.
func (p *Restartable) Kill() { p.signal(syscall.SIGKILL, false) }

// Stop sends SIGTERM and waits; after 20 s the process group is killed.
// Then the process group of every earlier start is killed too, so that
// children left behind by a Kill do not outlive the test.
func (p *Restartable) Stop() {
	p.signal(syscall.SIGTERM, true)
	p.mu.Lock()
	groups := p.groups
	p.groups = nil
	p.mu.Unlock()
	for _, g := range groups {
		_ = syscall.Kill(-g, syscall.SIGKILL)
	}
}

func (p *Restartable) signal(sig syscall.Signal, group bool) {
	p.mu.Lock()
	cmd, exit := p.cmd, p.exit
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	pgid := cmd.Process.Pid
	_ = cmd.Process.Signal(sig)
	select {
	case <-exit:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-exit
	}
	if group {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	p.mu.Lock()
	p.cmd = nil
	p.mu.Unlock()
}

// Log is what the process has written so far.
func (p *Restartable) Log() string {
	data, _ := os.ReadFile(p.LogPath)
	return string(data)
}

// LogTail is the last n lines of the process's output, for failure
// messages.
func (p *Restartable) LogTail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// inheritedEnv is the test's environment without its DRANODE_ variables
// (Restartable.Env says why).
func inheritedEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DRANODE_") {
			env = append(env, kv)
		}
	}
	return env
}
