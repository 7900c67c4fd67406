//go:build !unix

package agent

import (
	"errors"
	"fmt"
	"os"
)

// tryLock cannot lock on this platform: without the lock two instances
// could both take the record, so rolling upgrades are refused here.
func tryLock(path string) (*os.File, error) {
	return nil, fmt.Errorf("lock %s: %w", path, errors.ErrUnsupported)
}

func refused(error) bool { return false }
