//go:build !(darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd)

package checkpoint

import (
	"errors"
	"fmt"
	"runtime"
)

// TryLock fails where flock is not available: without a lock two writers
// could interleave, and a store that cannot promise exclusive access must
// not pretend to.
func TryLock(path string) (*Lock, error) {
	return nil, fmt.Errorf("checkpoint: lock %s: no flock on %s: %w", path, runtime.GOOS, errors.ErrUnsupported)
}
