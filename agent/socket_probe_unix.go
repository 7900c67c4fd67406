//go:build unix

package agent

import (
	"errors"
	"syscall"
)

// refused reports whether a dial failed because nothing listens on the
// socket: the only proof that a socket file is stale.
func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
