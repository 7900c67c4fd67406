//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd

package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive, non-blocking flock on path (created 0600 if
// missing). The lock file is never removed: removing it would let two
// holders lock two different inodes under the same name. flock locks belong
// to the open file description, so a second lock from the same process on
// the same path fails too, which is what we want.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: open lock file: %w", err)
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
			return nil, fmt.Errorf("checkpoint: lock %s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("checkpoint: lock %s: %w", path, err)
	}
	return f, nil
}

// unlockFile releases the lock by closing the descriptor.
func unlockFile(f *os.File) error {
	return f.Close()
}
