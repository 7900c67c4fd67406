//go:build unix

package kubeletcompat

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// readers are the functions that take a path.
var readers = map[string]func(path string) error{
	"ReadDRAManagerState":         func(p string) error { _, err := ReadDRAManagerState(p); return err },
	"ReadDeviceManagerCheckpoint": func(p string) error { _, err := ReadDeviceManagerCheckpoint(p); return err },
}

func TestReadersRefuseWhatIsNotACheckpointFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	// A sparse file one byte over the limit: refused by its size, unread.
	large := filepath.Join(dir, "large")
	f, err := os.Create(large)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxCheckpointSize + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	link := filepath.Join(dir, "link-to-fifo")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		path string
		want error
	}{
		{"/dev/zero", ErrNotRegular},    // endless data
		{"/dev/urandom", ErrNotRegular}, // endless data
		{fifo, ErrNotRegular},           // no writer: an open would block
		{link, ErrNotRegular},           // what the link points at counts
		{dir, ErrNotRegular},            // a directory
		{large, ErrTooLarge},            // over MaxCheckpointSize
		{filepath.Join(dir, "missing"), fs.ErrNotExist},
	}
	for name, read := range readers {
		for _, c := range cases {
			err := read(c.path)
			if !errors.Is(err, c.want) {
				t.Errorf("%s(%s): %v, want %v", name, c.path, err, c.want)
				continue
			}
			var pe *fs.PathError
			if !errors.As(err, &pe) || pe.Path != c.path || !strings.Contains(err.Error(), c.path) {
				t.Errorf("%s(%s): %v does not name the path in an *fs.PathError", name, c.path, err)
			}
		}
	}
}

func TestDecodeErrorsSayData(t *testing.T) {
	for _, d := range []struct {
		name   string
		decode func([]byte) error
	}{
		{"DecodeDRAManagerState", func(b []byte) error { _, err := DecodeDRAManagerState(b); return err }},
		{"DecodeDeviceManagerCheckpoint", func(b []byte) error { _, err := DecodeDeviceManagerCheckpoint(b); return err }},
	} {
		err := d.decode([]byte(`{"Data":`))
		if err == nil || !strings.Contains(err.Error(), "corrupt data at offset") {
			t.Errorf("%s: %v, want an error about the data, not an empty path", d.name, err)
		}
	}
}
