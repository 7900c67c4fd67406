package durable

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
)

// Writer writes files durably. Its zero value fsyncs and counts nothing; it
// is what WriteFile and SyncDir use. A Writer is safe for concurrent use
// (writers of the same path leave one of their files whole).
type Writer struct {
	// NoSync skips every fsync. Files are still replaced through a
	// temporary file and a rename, so readers see the old or the new file
	// whole and a crash of the process loses nothing, but a crash of the
	// machine may lose recent writes or leave a file empty. Set it only
	// for files that are rewritten after a reboot anyway or live on a
	// tmpfs, where fsync buys nothing.
	NoSync bool
	// Syncs, when not nil, is incremented after each fsync that succeeds,
	// of a file or of a directory, so that callers and tests can tell how
	// many a change cost.
	Syncs *atomic.Uint64
}

// TempPrefix is the start of the names of the temporary files a Writer
// creates while replacing the file called name: "." + name + ".tmp-".
func TempPrefix(name string) string { return "." + name + ".tmp-" }

// WriteFile replaces path with data using the zero Writer.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return Writer{}.WriteFile(path, data, perm)
}

// SyncDir makes creations, renames and removals in dir durable using the
// zero Writer.
func SyncDir(dir string) error { return Writer{}.SyncDir(dir) }

// WriteFile replaces path with data, creating it if missing: it writes a
// temporary file in the same directory (see TempPrefix) with mode perm
// (exactly perm: the umask does not apply), fsyncs it, closes it, renames it
// over path and fsyncs the directory. When it returns nil the new file is
// durable; whenever it returns, and after a crash at any point, path holds
// the old or the new complete file. On failure the temporary file is
// removed. The directory must exist. Errors read "write <path>: ..." and
// wrap the underlying *fs.PathError or *os.LinkError; like the os
// package's, they carry no package prefix, for callers to add theirs.
func (w Writer) WriteFile(path string, data []byte, perm fs.FileMode) error {
	if err := w.writeFile(path, data, perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func (w Writer) writeFile(path string, data []byte, perm fs.FileMode) (err error) {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, TempPrefix(name)+"*")
	if err != nil {
		return err
	}
	closed, renamed := false, false
	defer func() {
		if err != nil && !renamed {
			if !closed {
				tmp.Close()
			}
			os.Remove(tmp.Name())
		}
	}()
	// CreateTemp makes 0600 files; set the mode explicitly so that neither
	// it nor the umask decides who can read the file.
	if err = tmp.Chmod(perm); err != nil {
		return err
	}
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = w.sync(tmp); err != nil {
		return err
	}
	closed = true
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	renamed = true
	return w.syncDir(dir)
}

// SyncDir makes creations, renames and removals in dir durable: it opens
// the directory and fsyncs it. With NoSync it does nothing. Errors read
// "sync directory <dir>: ..." and wrap the underlying error.
func (w Writer) SyncDir(dir string) error {
	if err := w.syncDir(dir); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

func (w Writer) syncDir(dir string) error {
	if w.NoSync {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = w.sync(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func (w Writer) sync(f *os.File) error {
	if w.NoSync {
		return nil
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if w.Syncs != nil {
		w.Syncs.Add(1)
	}
	return nil
}
