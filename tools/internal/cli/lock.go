package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/dranode/dranode/checkpoint"
)

// holdJournalLock takes the flock a journal's writer holds on dir/lock, so
// that no agent starts writing the record while migrate copies it. A missing
// lock file means no writer ever opened the directory with the current code;
// where flock does not exist there is nothing to take, and claimcache.Open
// still refuses a record another process holds. The returned function
// releases the lock.
func holdJournalLock(path string) (release func(), err error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	lock, err := checkpoint.TryLock(path)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return func() {}, nil
	case errors.Is(err, checkpoint.ErrLocked):
		return nil, fmt.Errorf("%s is held by a running process (stop the agent first): %w", path, checkpoint.ErrLocked)
	case err != nil:
		return nil, err
	}
	return func() { lock.Unlock() }, nil
}
