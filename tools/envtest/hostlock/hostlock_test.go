package hostlock_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dranode/dranode/tools/envtest/hostlock"
)

// free reports whether nobody holds the lock file: a new open file
// description can take it without waiting.
func free(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func usePath(t *testing.T) string {
	p := os.Getenv("HOSTLOCK_TEST_PATH")
	if p == "" {
		p = filepath.Join(t.TempDir(), "host.lock")
	}
	hostlock.SetPath(p)
	t.Cleanup(func() { hostlock.SetPath(hostlock.Path) })
	return p
}

func TestHoldsNestInOneProcess(t *testing.T) {
	path := usePath(t)
	outer, err := hostlock.Hold(context.Background(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := hostlock.Hold(context.Background(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	inner()
	inner() // a second call of one release is a no-op
	if free(t, path) {
		t.Fatal("the lock was let go while the outer hold remains")
	}
	outer()
	if !free(t, path) {
		t.Fatal("the lock is still held after every release")
	}
}

func TestWaiterGivesUpWithHolderNamed(t *testing.T) {
	path := usePath(t)
	// Another open file description plays the other process.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	f.WriteString("pid 1: the other test")
	ctx, cancel := context.WithCancel(context.Background())
	var waited []string
	logf := func(format string, args ...any) {
		waited = append(waited, format)
		cancel() // give up as soon as the wait is reported
	}
	_, err = hostlock.Hold(ctx, logf)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "the other test") {
		t.Fatalf("Hold while held elsewhere: %v; want context.Canceled naming the holder", err)
	}
	if len(waited) != 1 {
		t.Fatalf("waiting was reported %d times, want 1", len(waited))
	}
	// Once the other holder goes, the lock can be held.
	f.Close()
	release, err := hostlock.Hold(context.Background(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	release()
}

func TestChildSharesTheHold(t *testing.T) {
	if os.Getenv("HOSTLOCK_CHILD") != "" {
		release, err := hostlock.Hold(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		release()
		return
	}
	path := usePath(t)
	release, err := hostlock.Hold(context.Background(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	// Without Pass the child would wait for its parent forever; with a
	// context the test would only fail later, so the child gets none.
	child := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestChildSharesTheHold$")
	child.Env = append(os.Environ(), "HOSTLOCK_CHILD=1", "HOSTLOCK_TEST_PATH="+path)
	if err := hostlock.Pass(child); err != nil {
		t.Fatal(err)
	}
	if out, err := child.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if free(t, path) {
		t.Fatal("the parent's hold ended with the child's")
	}
}

func TestPassWithoutHoldFails(t *testing.T) {
	usePath(t)
	if err := hostlock.Pass(exec.Command("true")); err == nil {
		t.Fatal("Pass without a hold succeeded")
	}
}
