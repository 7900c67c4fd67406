package durable_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dranode/dranode/checkpoint/durable"
)

// names lists dir's entries, to show what a write left behind.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		old   []byte // nil: no file before
		data  []byte
		perm  fs.FileMode
		write func(path string, data []byte, perm fs.FileMode) error
	}{
		{"new file", nil, []byte("new"), 0o600, durable.WriteFile},
		{"replaces", []byte("old contents, longer"), []byte("new"), 0o600, durable.WriteFile},
		{"empty data", []byte("old"), nil, 0o600, durable.WriteFile},
		// 0666 under the usual umask 022 would become 0644 if the umask
		// applied.
		{"mode is exactly perm", nil, []byte("x"), 0o666, durable.WriteFile},
		{"readable by others", []byte("old"), []byte("x"), 0o644, durable.WriteFile},
		{"NoSync replaces too", []byte("old"), []byte("new"), 0o640, durable.Writer{NoSync: true}.WriteFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state")
			if tc.old != nil {
				if err := os.WriteFile(path, tc.old, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := tc.write(path, tc.data, tc.perm); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.data) {
				t.Errorf("file holds %q, want %q", got, tc.data)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != tc.perm {
				t.Errorf("mode %v, want %v", fi.Mode().Perm(), tc.perm)
			}
			if n := names(t, dir); len(n) != 1 || n[0] != "state" {
				t.Errorf("directory holds %q, want only the file", n)
			}
		})
	}
}

func TestWriteFileRelativePath(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := durable.WriteFile("plain", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile("plain"); err != nil || string(got) != "x" {
		t.Fatalf("read back %q, %v", got, err)
	}
}

// TestSyncsCounted checks which fsyncs happen by counting them: a file
// write syncs the file and its directory, NoSync syncs nothing.
func TestSyncsCounted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		noSync bool
		op     func(w durable.Writer, dir string) error
		want   uint64
	}{
		{"WriteFile syncs file and directory", false, func(w durable.Writer, dir string) error {
			return w.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o600)
		}, 2},
		{"SyncDir syncs the directory", false, func(w durable.Writer, dir string) error { return w.SyncDir(dir) }, 1},
		{"NoSync WriteFile", true, func(w durable.Writer, dir string) error {
			return w.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o600)
		}, 0},
		{"NoSync SyncDir", true, func(w durable.Writer, dir string) error { return w.SyncDir(dir) }, 0},
		{"failed write counts nothing", false, func(w durable.Writer, dir string) error {
			err := w.WriteFile(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600)
			if err == nil {
				return errors.New("write into a missing directory succeeded")
			}
			return nil
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Uint64
			w := durable.Writer{NoSync: tc.noSync, Syncs: &n}
			if err := tc.op(w, t.TempDir()); err != nil {
				t.Fatal(err)
			}
			if got := n.Load(); got != tc.want {
				t.Errorf("%d fsyncs, want %d", got, tc.want)
			}
		})
	}
}

func TestWriteFileErrors(t *testing.T) {
	t.Run("missing directory", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "missing", "f")
		err := durable.WriteFile(path, []byte("x"), 0o600)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("got %v, want fs.ErrNotExist", err)
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("error %q does not name %s", err, path)
		}
	})
	t.Run("rename fails: temporary file removed", func(t *testing.T) {
		dir := t.TempDir()
		// A non-empty directory cannot be renamed over.
		path := filepath.Join(dir, "target")
		if err := os.MkdirAll(filepath.Join(path, "inside"), 0o755); err != nil {
			t.Fatal(err)
		}
		err := durable.WriteFile(path, []byte("x"), 0o600)
		var le *os.LinkError
		if !errors.As(err, &le) {
			t.Fatalf("got %v, want an *os.LinkError from the rename", err)
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("error %q does not name %s", err, path)
		}
		if n := names(t, dir); len(n) != 1 || n[0] != "target" {
			t.Errorf("directory holds %q, want only the target (no temporary file)", n)
		}
	})
}

func TestSyncDirMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	err := durable.SyncDir(dir)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("got %v, want fs.ErrNotExist naming %s", err, dir)
	}
}

// TestReadersSeeWholeFiles reads the file while it is being replaced: every
// read must see one of the complete contents, never an empty or mixed file
// (which truncating and rewriting in place would show).
func TestReadersSeeWholeFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	a, b := bytes.Repeat([]byte("a"), 64<<10), bytes.Repeat([]byte("b"), 32<<10)
	w := durable.Writer{NoSync: true} // the rename, not the fsync, makes it atomic
	if err := w.WriteFile(path, a, 0o600); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			got, err := os.ReadFile(path)
			if err != nil || !(bytes.Equal(got, a) || bytes.Equal(got, b)) {
				bad.Store(struct {
					n   int
					err error
				}{len(got), err})
				return
			}
		}
	}()
	for i := range 200 {
		data := a
		if i%2 == 0 {
			data = b
		}
		if err := w.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Fatalf("a reader saw a partial file: %+v", v)
	}
}

// TestConcurrentWriters replaces one file from several goroutines: the
// result is one writer's data whole, and no temporary file is left.
func TestConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := bytes.Repeat([]byte{byte('a' + i)}, 4096)
			if err := durable.WriteFile(path, data, 0o600); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4096 || !bytes.Equal(got, bytes.Repeat(got[:1], 4096)) {
		t.Fatalf("file mixes writers: %d bytes starting %q", len(got), got[:min(len(got), 8)])
	}
	if n := names(t, dir); len(n) != 1 {
		t.Errorf("directory holds %q, want only the file", n)
	}
}

func TestTempPrefix(t *testing.T) {
	// Pinned: owners recognise the debris of crashed writers, including
	// those of earlier releases, by this prefix.
	if got, want := durable.TempPrefix("spec.json"), ".spec.json.tmp-"; got != want {
		t.Fatalf("TempPrefix = %q, want %q", got, want)
	}
}
