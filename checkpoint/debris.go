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

	"github.com/dranode/dranode/checkpoint/durable"
)

const fileMode = 0o600

// writeFile replaces path with data durably (see durable.WriteFile),
// counting fsyncs into n.
func writeFile(path string, data []byte, n *atomic.Uint64) error {
	if err := (durable.Writer{Syncs: n}).WriteFile(path, data, fileMode); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// syncDir makes creations, renames and removals in dir durable, counting
// the fsync into n.
func syncDir(dir string, n *atomic.Uint64) error {
	if err := (durable.Writer{Syncs: n}).SyncDir(dir); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// removeTemps removes the temporary files (durable.TempPrefix) left by a
// crashed writer of name. They are only ever created by the holder of the
// lock, so a holder that finds one knows it is debris.
func removeTemps(dir, name string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("checkpoint: list %s: %w", dir, err)
	}
	prefix := durable.TempPrefix(name)
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
	return path + asideInfix + now.UTC().Format(asideTimeLayout)
}

const (
	asideInfix      = ".corrupt-"
	asideTimeLayout = "20060102T150405.000000000Z"
)

// ParseAsideName tells whether name (a file name, or a path) is a copy of
// damaged data that MoveCorruptAside made (<file>.corrupt-<UTC timestamp>),
// and if so returns the file it was made from (in name's directory) and
// when. Tools list these next to a store without hard-coding the format.
func ParseAsideName(name string) (from string, at time.Time, ok bool) {
	i := strings.LastIndex(name, asideInfix)
	if i <= 0 {
		return "", time.Time{}, false
	}
	at, err := time.Parse(asideTimeLayout, name[i+len(asideInfix):])
	if err != nil {
		return "", time.Time{}, false
	}
	return name[:i], at, true
}

// moveAside renames path to its corrupt-aside name and makes that durable.
func moveAside(path string, now time.Time, fsyncs *atomic.Uint64) (string, error) {
	aside := asideName(path, now)
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("checkpoint: move corrupt file aside: %w", err)
	}
	return aside, syncDir(filepath.Dir(path), fsyncs)
}
