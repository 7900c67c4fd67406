//go:build unix

package config

import "syscall"

// canAccess asks the kernel whether this process may access path with mode
// (access(2)), which also knows what mode bits do not show: a read-only
// file system.
func canAccess(path string, mode uint32) (checked bool, err error) {
	return true, syscall.Access(path, mode)
}
