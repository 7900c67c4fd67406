package envtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one control-plane child: its own process group (so that Stop
// reaches anything it forks), its output in a log file in the environment's
// directory, and a goroutine that reaps it and records how it ended.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	done    chan struct{} // closed once the process has been reaped
	waitErr error         // valid after done is closed
}

func startProcess(name, binary string, args []string, dir string, stdout, stderr io.Writer, outMu *sync.Mutex) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("envtest: creating log for %s: %w", name, err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	if stdout != nil {
		cmd.Stdout = io.MultiWriter(f, prefixWriter(stdout, name, outMu))
	}
	if stderr != nil {
		cmd.Stderr = io.MultiWriter(f, prefixWriter(stderr, name, outMu))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// If the test binary dies without Stop (a panic, a -timeout), the
		// children must not keep running on a shared machine. The signal
		// comes when the forking thread ends, hence spawn.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := spawn(cmd); err != nil {
		f.Close()
		return nil, fmt.Errorf("envtest: starting %s (%s): %w", name, binary, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, logFile: f, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// spawnRequests feeds the one goroutine that starts every child process.
// It holds its OS thread for the life of the program: Linux sends Pdeathsig
// when the thread that forked a child exits, not the process, and an
// ordinary goroutine's thread can end (when some goroutine locked to it
// returns) while the children are still wanted.
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

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace, and
// waits until the process is reaped.
func (p *process) stop(grace time.Duration) error {
	pgid := p.cmd.Process.Pid
	if !p.exited() {
		if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("envtest: signalling %s (pgid %d): %w", p.name, pgid, err)
		}
		select {
		case <-p.done:
		case <-time.After(grace):
		}
	}
	// Also after a clean exit: a child the process forked may still be in
	// the group.
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("envtest: killing %s (pgid %d): %w", p.name, pgid, err)
	}
	<-p.done
	return nil
}

// Pid is the process id (also its process-group id).
func (p *process) pid() int { return p.cmd.Process.Pid }

// tail returns the last n lines of the process's log.
func (p *process) tail(n int) string { return tailFile(p.logPath, n) }

func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(log %s unreadable: %v)", path, err)
	}
	data = bytes.TrimRight(data, "\n")
	lines := bytes.Split(data, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// logContains reports whether the process's log has s; used to recognise a
// port taken between picking it and the process binding it.
func (p *process) logContains(s string) bool {
	data, err := os.ReadFile(p.logPath)
	return err == nil && bytes.Contains(data, []byte(s))
}

// prefixWriter prefixes each write with the process name, so interleaved
// output of three processes stays readable. Writes from exec's copying
// goroutines arrive in chunks, not lines; the prefix marks chunks. mu is
// shared by every process of an environment: the caller's writer (a
// bytes.Buffer, say) need not be safe for concurrent use.
func prefixWriter(w io.Writer, name string, mu *sync.Mutex) io.Writer {
	return &prefixed{w: w, prefix: "[" + name + "] ", mu: mu}
}

type prefixed struct {
	w      io.Writer
	prefix string
	mu     *sync.Mutex
}

func (p *prefixed) Write(b []byte) (int, error) {
	s := strings.TrimRight(string(b), "\n")
	s = p.prefix + strings.ReplaceAll(s, "\n", "\n"+p.prefix) + "\n"
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := io.WriteString(p.w, s); err != nil {
		return 0, err
	}
	return len(b), nil
}
