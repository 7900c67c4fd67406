// Package childproc starts the long-lived child processes of tests (the
// control plane's etcd and kube-apiserver, a node's containerd and kubelet)
// so that they never outlive the test binary on a shared machine: each in a
// process group of its own, so that a stop reaches what it forked, and with
// SIGKILL as its parent-death signal, so that a test binary that dies
// without cleaning up (a panic, a -timeout) takes them along.
package childproc

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Process is a started child, reaped by a goroutine of its own.
type Process struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error // valid once done is closed
}

// Start starts cmd (not yet started) as described in the package comment;
// name is how errors refer to it.
func Start(name string, cmd *exec.Cmd) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := spawn(cmd); err != nil {
		return nil, fmt.Errorf("starting %s (%s): %w", name, cmd.Path, err)
	}
	p := &Process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id, also its process group's.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has ended and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is how the process ended (exec.Cmd.Wait's error); valid after Done.
func (p *Process) Err() error { return p.waitErr }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to the process group, SIGKILL after grace, and waits
// until the process is reaped. The group is killed also after a clean
// exit: a child the process forked may still be in it.
func (p *Process) Stop(grace time.Duration) error {
	pgid := p.cmd.Process.Pid
	if !p.Exited() {
		if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signalling %s (pgid %d): %w", p.name, pgid, err)
		}
		select {
		case <-p.done:
		case <-time.After(grace):
		}
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s (pgid %d): %w", p.name, pgid, err)
	}
	<-p.done
	return nil
}

// spawnRequests feeds the one goroutine that starts every child process.
// It holds its OS thread for the life of the program: Linux sends the
// parent-death signal when the thread that forked a child exits, not the
// process, and an ordinary goroutine's thread can end (when some goroutine
// locked to it returns) while the children are still wanted.
var (
	spawnOnce     sync.Once
	spawnRequests chan spawnRequest
)

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnRequests = make(chan spawnRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the program
			for req := range spawnRequests {
				req.done <- req.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnRequests <- spawnRequest{cmd: cmd, done: done}
	return <-done
}
