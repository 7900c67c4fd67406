package hostlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Path is the lock file. It lives in /run, which is machine-wide and
// emptied at boot, and is never removed: removing it would let two holders
// lock two different inodes under the same name.
const Path = "/run/dranode-host.lock"

// path is Path but in this package's own tests.
var path = Path

// fdEnv names the descriptor a child process inherits from a holder (Pass).
const fdEnv = "DRANODE_HOST_LOCK_FD"

var held struct {
	sync.Mutex
	count int
	file  *os.File
}

// Hold blocks until this process holds the host lock, or ctx ends. Every
// successful Hold must be matched by one call of the returned release; the
// lock is let go when the last one runs. While it waits, Hold reports the
// current holder through logf (nil: silent).
func Hold(ctx context.Context, logf func(format string, args ...any)) (release func(), err error) {
	held.Lock()
	defer held.Unlock()
	if held.count == 0 {
		f, err := acquire(ctx, logf)
		if err != nil {
			return nil, err
		}
		held.file = f
	}
	held.count++
	var once sync.Once
	return func() { once.Do(releaseOne) }, nil
}

// HoldT holds the host lock for the rest of tb, released at its cleanup.
func HoldT(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	if d, ok := tb.(interface{ Context() context.Context }); ok {
		ctx = d.Context()
	}
	release, err := Hold(ctx, tb.Logf)
	if err != nil {
		tb.Fatalf("hostlock: %v", err)
	}
	tb.Cleanup(release)
}

// Pass makes cmd, not yet started, share this process's hold: the child's
// Hold returns at once, and the lock stays held while either process lives.
// The caller must hold the lock.
func Pass(cmd *exec.Cmd) error {
	held.Lock()
	defer held.Unlock()
	if held.count == 0 {
		return errors.New("hostlock: Pass without holding the lock")
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, held.file)
	fd := 3 + len(cmd.ExtraFiles) - 1
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, fdEnv+"="+strconv.Itoa(fd))
	return nil
}

func releaseOne() {
	held.Lock()
	defer held.Unlock()
	held.count--
	if held.count == 0 {
		held.file.Close()
		held.file = nil
	}
}

// acquire returns the open lock file, locked. An inherited descriptor
// (Pass) is already locked: flock belongs to the open file description,
// which parent and child share.
func acquire(ctx context.Context, logf func(string, ...any)) (*os.File, error) {
	if s := os.Getenv(fdEnv); s != "" {
		fd, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("hostlock: %s=%q: %w", fdEnv, s, err)
		}
		return os.NewFile(uintptr(fd), path), nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("hostlock: %w", err)
	}
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); errors.Is(err, syscall.EWOULDBLOCK) {
		if logf != nil {
			logf("hostlock: waiting for %s, held by %s", path, holder(f))
		}
		if err := waitLock(ctx, f); err != nil {
			return nil, err // waitLock closes f once its flock returns
		}
	} else if err != nil {
		f.Close()
		return nil, fmt.Errorf("hostlock: %s: %w", path, err)
	}
	// Who holds it, for the next waiter's message.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(fmt.Sprintf("pid %d: %s\n", os.Getpid(), strings.Join(os.Args, " "))), 0)
	}
	return f, nil
}

// waitLock blocks in flock until the lock is free. A blocked flock cannot
// be interrupted from Go, so a canceled wait leaves the goroutine to close
// the file once the lock comes.
func waitLock(ctx context.Context, f *os.File) error {
	done := make(chan error, 1)
	fd := int(f.Fd())
	go func() { done <- flockFD(fd, syscall.LOCK_EX) }()
	select {
	case err := <-done:
		if err != nil {
			f.Close()
			return fmt.Errorf("hostlock: %s: %w", path, err)
		}
		return nil
	case <-ctx.Done():
		go func() { <-done; f.Close() }()
		return fmt.Errorf("hostlock: waiting for %s (held by %s): %w", path, holder(f), ctx.Err())
	}
}

func flock(f *os.File, how int) error { return flockFD(int(f.Fd()), how) }

func flockFD(fd, how int) error {
	for {
		err := syscall.Flock(fd, how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

func holder(f *os.File) string {
	b := make([]byte, 512)
	n, _ := f.ReadAt(b, 0)
	if s := string(bytes.TrimSpace(b[:n])); s != "" {
		return s
	}
	return "another process"
}
