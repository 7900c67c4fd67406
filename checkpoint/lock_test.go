package checkpoint_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/dranode/dranode/checkpoint"
)

func TestTryLockExcludesUntilUnlocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	first, err := checkpoint.TryLock(path)
	if err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if _, err := checkpoint.TryLock(path); !errors.Is(err, checkpoint.ErrLocked) {
		t.Fatalf("second lock while held: got %v, want ErrLocked", err)
	}
	if err := first.Unlock(); err != nil {
		t.Fatalf("unlock: %v", err)
	}
	if err := first.Unlock(); err != nil {
		t.Fatalf("second unlock: %v", err)
	}
	again, err := checkpoint.TryLock(path)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	again.Unlock()
}
