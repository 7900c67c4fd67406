//go:build unix

package agent

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// tryLock takes an exclusive, non-blocking flock on path (created 0600).
// errLockBusy means another open file description holds it: a live
// process, since the kernel drops the locks of a dead one.
func tryLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", path, errLockBusy)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// refused reports whether a dial failed because nothing listens on the
// socket: the only proof that a socket file is stale.
func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
