//go:build unix

package pluginmgr

import (
	"errors"
	"os"
	"syscall"
)

// ownedByMe reports whether this process's user owns the file: another
// user's socket directory is never removed.
func ownedByMe(info os.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}

// refused reports whether a dial failed because nothing listens on the
// socket any more.
func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
