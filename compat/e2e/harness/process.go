package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BuildBinary builds the main package pkg (e.g. "./cmd/my-driver") of the
// module in moduleDir into out, with the workspace off (GOWORK=off), as a
// user building that module alone would. A failure is a *BuildError with
// the compiler's output.
func BuildBinary(moduleDir, pkg, out string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if output, err := cmd.CombinedOutput(); err != nil {
		return &BuildError{Binary: filepath.Base(moduleDir) + "/" + strings.TrimPrefix(pkg, "./"), Output: string(output), Err: err}
	}
	return nil
}

// MakeDeviceNodes creates n simulated device nodes gpu0, gpu1, ... in dir
// as character devices with the numbers of /dev/null, which the reference
// CDI library accepts for injection (it refuses plain files). It needs
// CAP_MKNOD.
func MakeDeviceNodes(dir string, n int) error { return makeDeviceNodes(dir, n) }

// Process is a driver binary (any DRA kubelet plugin) running as a child
// process with its output in a log file, for tests that start, kill and
// restart it.
type Process struct {
	Path    string
	Args    []string
	LogPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{}
	err  error
}

// ErrProcessExited is returned when a Process ended while the harness
// waited for it to do something.
var ErrProcessExited = errors.New("process exited")

// Start runs the binary with its arguments; output is appended to LogPath.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s already running", p.Path)
	}
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("log of %s: %w", p.Path, err)
	}
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", p.Path, err)
	}
	exit := make(chan struct{})
	p.cmd, p.exit, p.err = cmd, exit, nil
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
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited is closed when the current process has ended (nil before Start).
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// ExitError is how the last process ended (nil: status 0 or running).
func (p *Process) ExitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Kill ends the process with SIGKILL, a crash, and waits for it.
func (p *Process) Kill() { p.signal(syscall.SIGKILL) }

// Stop sends SIGTERM and waits; after 20 s the process group is killed.
func (p *Process) Stop() { p.signal(syscall.SIGTERM) }

func (p *Process) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, exit := p.cmd, p.exit
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exit:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exit
	}
	p.mu.Lock()
	p.cmd = nil
	p.mu.Unlock()
}

// LogTail is the last n lines of the process's output, for failure
// messages.
func (p *Process) LogTail(n int) string {
	data, _ := os.ReadFile(p.LogPath)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
