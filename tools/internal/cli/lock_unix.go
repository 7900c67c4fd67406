//go:build unix

package cli

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/dranode/dranode/checkpoint"
)

// holdJournalLock takes the flock a journal's writer holds on dir/lock, so
// that no agent starts writing the record while migrate copies it. A missing
// lock file means no writer ever opened the directory with the current code.
// The returned function releases the lock.
func holdJournalLock(path string) (release func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, err
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
			return nil, fmt.Errorf("%s is held by a running process (stop the agent first): %w", path, checkpoint.ErrLocked)
		}
		return nil, err
	}
	return func() { f.Close() }, nil
}
