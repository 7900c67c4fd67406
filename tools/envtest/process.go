package envtest

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/dranode/dranode/tools/envtest/childproc"
)

// process is one control-plane child (childproc: its own process group,
// killed with the test binary) with its output in a log file in the
// environment's directory.
type process struct {
	*childproc.Process
	name    string
	binary  string
	args    []string // what a restart runs again
	logPath string
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
	p, err := childproc.Start(name, cmd)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("envtest: %w", err)
	}
	go func() { <-p.Done(); f.Close() }() // Wait has copied the last output by then
	return &process{Process: p, name: name, binary: binary, args: args, logPath: logPath}, nil
}

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
