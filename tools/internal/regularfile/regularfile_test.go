//go:build unix

package regularfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(regular, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	tests := []struct {
		path string
		want string // "" for success, else what the error says
	}{
		{regular, ""},
		{link, ""},
		{dir, "is a directory, not a regular file"},
		{fifo, "is a named pipe (FIFO), not a regular file"},
		{"/dev/null", "is a character device, not a regular file"},
		{filepath.Join(dir, "missing"), "no such file"},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			f, err := Open(tt.path)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if f.Size() != 5 {
					t.Errorf("size %d, want 5", f.Size())
				}
				return
			}
			if err == nil {
				f.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), tt.want) || (strings.Contains(tt.want, "not a regular") && !errors.Is(err, ErrNotRegular)) {
				t.Errorf("error %q, want %q matching ErrNotRegular", err, tt.want)
			}
		})
	}
}

// A file is read as it was when opened: what is appended afterwards (a log
// being written) is not chased.
func TestReadAllStopsAtTheSizeAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("before"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString(" and after")
	w.Close()
	got, err := f.ReadAll(100, "test file")
	if err != nil || string(got) != "before" {
		t.Errorf("read %q, %v; want %q", got, err, "before")
	}
}

func TestReadAllRefusesTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(path, make([]byte, 11), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := ReadAll(path, 10, "widget")
	var tl *TooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, ErrTooLarge) || tl.Size != 11 || tl.Limit != 10 || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "widget") {
		t.Errorf("error %v, want a TooLargeError naming %s, 11 > 10 and the widget", err, path)
	}
}
