package durable

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// MkdirAll creates path and any missing parents, like os.MkdirAll, and makes
// each creation durable: after a directory is made, its parent is synced, so
// a power cut cannot take away a directory (and the files later made durable
// in it) that MkdirAll reported as created. Directories that already exist
// are not synced again.
func MkdirAll(path string, perm fs.FileMode) error { return Writer{}.MkdirAll(path, perm) }

// MkdirAll is the package-level MkdirAll with w's options; under NoSync it is
// os.MkdirAll.
func (w Writer) MkdirAll(path string, perm fs.FileMode) error {
	if w.NoSync {
		if err := os.MkdirAll(path, perm); err != nil {
			return fmt.Errorf("create directory %s: %w", path, err)
		}
		return nil
	}
	// Find the missing directories, nearest the root first.
	var missing []string
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		info, err := os.Stat(p)
		if err == nil {
			if !info.IsDir() {
				return fmt.Errorf("create directory %s: %s is not a directory", path, p)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("create directory %s: %w", path, err)
		}
		missing = append(missing, p)
		if parent := filepath.Dir(p); parent == p {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		dir := missing[i]
		if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create directory %s: %w", path, err)
		}
		// Synced even when another process made it first: whoever made it
		// may not have synced the parent yet, and our caller is about to
		// rely on it.
		if err := w.SyncDir(filepath.Dir(dir)); err != nil {
			return fmt.Errorf("create directory %s: %w", path, err)
		}
	}
	return nil
}
