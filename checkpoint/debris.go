package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

const fileMode = 0o600

// tempPrefix marks temporary files. They are only ever created by the
// holder of the lock, so a holder that finds one knows it is debris from a
// crash and removes it.
func tempPrefix(name string) string { return "." + name + ".tmp-" }

// writeAtomic replaces path with data durably: a temporary file in the same
// directory, fsync, rename over path, fsync of the directory. A crash at any
// point leaves either the old or the new complete file under path.
func writeAtomic(path string, data []byte, fsyncs *atomic.Uint64) error {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, tempPrefix(name)+"*")
	if err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", path, err)
	}
	tmpName := tmp.Name()
	fail := func(err error) error {
		tmp.Close()
		os.Remove(tmpName)
		return fmt.Errorf("checkpoint: write %s: %w", path, err)
	}
	if err := tmp.Chmod(fileMode); err != nil {
		return fail(err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	fsyncs.Add(1)
	if err := tmp.Close(); err != nil {
		os.Remove(tmpName)
		return fmt.Errorf("checkpoint: write %s: %w", path, err)
	}
	if err := os.Rename(tmpName, path); err != nil {
		os.Remove(tmpName)
		return fmt.Errorf("checkpoint: write %s: %w", path, err)
	}
	return syncDir(dir, fsyncs)
}

// syncDir makes renames, creations and removals in dir durable.
func syncDir(dir string, fsyncs *atomic.Uint64) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("checkpoint: sync directory %s: %w", dir, err)
	}
	fsyncs.Add(1)
	return nil
}

// removeTemps removes temporary files left by a crashed writer of name.
func removeTemps(dir, name string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("checkpoint: list %s: %w", dir, err)
	}
	prefix := tempPrefix(name)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("checkpoint: remove stale temporary file: %w", err)
			}
		}
	}
	return nil
}

// asideName is where a corrupt file is moved: same directory, so the rename
// is atomic and the evidence stays next to the store.
func asideName(path string, now time.Time) string {
	return path + ".corrupt-" + now.UTC().Format("20060102T150405.000000000Z")
}

// moveAside renames path to its corrupt-aside name and makes that durable.
func moveAside(path string, now time.Time, fsyncs *atomic.Uint64) (string, error) {
	aside := asideName(path, now)
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("checkpoint: move corrupt file aside: %w", err)
	}
	return aside, syncDir(filepath.Dir(path), fsyncs)
}
