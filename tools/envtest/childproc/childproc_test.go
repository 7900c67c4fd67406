package childproc_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/dranode/dranode/tools/envtest/childproc"
)

func TestStopReachesTheWholeGroup(t *testing.T) {
	// The shell ignores SIGTERM and forks a grandchild that holds the
	// pipe's write end: the pipe ends (EOF) only when both are dead, which
	// only the group's SIGKILL after the grace can do.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command("sh", "-c", `trap "" TERM; sleep 300 & echo started; wait`)
	cmd.Stdout = w
	p, err := childproc.Start("sh", cmd)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(r)
	if line, err := out.ReadString('\n'); err != nil {
		t.Fatalf("the child did not start: %q, %v", line, err)
	}
	if pgid, err := syscall.Getpgid(p.PID()); err != nil || pgid != p.PID() {
		t.Fatalf("the child's process group: %d, %v; want its own (%d)", pgid, err, p.PID())
	}
	if err := p.Stop(100 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !p.Exited() {
		t.Fatal("Stop returned before the child was reaped")
	}
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) {
		t.Fatalf("the child's end: %v; want killed", p.Err())
	}
	eof := make(chan error, 1)
	go func() { _, err := io.ReadAll(out); eof <- err }()
	select {
	case err := <-eof:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // a deadline for a failure, not a pause
		t.Fatal("the grandchild still holds the pipe a minute after Stop: it survived")
	}
}

func TestStartErrorNamesTheChild(t *testing.T) {
	_, err := childproc.Start("missing", exec.Command("/nonexistent/binary"))
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Start of a missing binary: %v", err)
	}
	if want := fmt.Sprintf("starting missing (%s)", "/nonexistent/binary"); err.Error()[:len(want)] != want {
		t.Fatalf("error %q does not name the child", err)
	}
}
