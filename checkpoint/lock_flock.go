//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd

package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// TryLock takes an exclusive flock on path without waiting, creating the
// file (0600) if it is missing. A lock held by anyone else — another
// process, or another open of the same file in this process (flock locks
// belong to the open file description) — fails with an error matching
// ErrLocked. The kernel drops a dead holder's lock, so success is proof
// that no live process holds it.
//
// The lock file is never removed: removing it would let two holders lock
// two different inodes under the same name.
func TryLock(path string) (*Lock, error) {
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
	return &Lock{f: f}, nil
}
