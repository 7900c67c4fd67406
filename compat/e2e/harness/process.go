package harness

import (
	"errors"
	"fmt"
	"io"
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

// SimulatedGPU is device ("gpu-N") of a simulated GPU driver (gpu-plugin,
// the piecemeal driver) whose health markers (gpuN.unhealthy) are in Dir,
// the driver's devRoot.
type SimulatedGPU struct{ Dir, Device string }

// SimulatedGPUEnv is the environment variable in which the simulated GPU
// drivers give a container the UUID of device ("gpu-N") of driver:
// GPU_DEVICE_<driver in upper case, other characters than letters and
// digits as "_">_<N>, per driver (examples/gpu and the piecemeal driver
// document it).
func SimulatedGPUEnv(driver, device string) string {
	upper := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, driver)
	return "GPU_DEVICE_" + upper + "_" + strings.TrimPrefix(device, "gpu-")
}

// MarkUnhealthy puts the mark in each device's driver's devRoot that makes
// the simulated GPU drivers refuse to prepare it and report it unhealthy;
// unmark removes the marks.
func MarkUnhealthy(devices ...SimulatedGPU) (unmark func() error, err error) {
	var marks []string
	unmark = func() error {
		var errs []error
		for _, m := range marks {
			errs = append(errs, os.Remove(m))
		}
		return errors.Join(errs...)
	}
	for _, d := range devices {
		mark := filepath.Join(d.Dir, strings.Replace(d.Device, "gpu-", "gpu", 1)) + ".unhealthy"
		if err := os.WriteFile(mark, nil, 0o644); err != nil {
			return nil, errors.Join(fmt.Errorf("marking %s unhealthy: %w", d.Device, err), unmark())
		}
		marks = append(marks, mark)
	}
	return unmark, nil
}

// EmptyDir removes everything in dir, as a reboot empties a tmpfs such as
// /var/run (and the CDI specs in it).
func EmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// Process is a binary (the agent, or any DRA kubelet plugin) running as a
// child process in a process group of its own, with its output in a log
// file, for tests that start, kill and restart it.
type Process struct {
	Path    string
	Args    []string
	LogPath string
	// Output, when set, also receives the process's output.
	Output io.Writer

	mu     sync.Mutex
	cmd    *exec.Cmd
	exit   chan struct{}
	err    error
	groups []int // the process group of every start, for Stop
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
	var out io.Writer = logFile
	if p.Output != nil {
		out = io.MultiWriter(logFile, p.Output)
	}
	cmd := exec.Command(p.Path, p.Args...)
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

// Kill ends the process alone with SIGKILL, a crash, and waits for it; its
// children notice the broken connection themselves.
func (p *Process) Kill() { p.signal(syscall.SIGKILL, false) }

// Stop sends SIGTERM and waits; after 20 s the process group is killed.
// Then the process group of every earlier start is killed too, so that
// children left behind by a Kill do not outlive the test.
func (p *Process) Stop() {
	p.signal(syscall.SIGTERM, true)
	p.mu.Lock()
	groups := p.groups
	p.groups = nil
	p.mu.Unlock()
	for _, g := range groups {
		_ = syscall.Kill(-g, syscall.SIGKILL)
	}
}

func (p *Process) signal(sig syscall.Signal, group bool) {
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
func (p *Process) Log() string {
	data, _ := os.ReadFile(p.LogPath)
	return string(data)
}

// LogTail is the last n lines of the process's output, for failure
// messages.
func (p *Process) LogTail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
