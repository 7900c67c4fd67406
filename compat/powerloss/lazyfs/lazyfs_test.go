package lazyfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
)

func skipUnlessAvailable(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("power-loss tests need root and /dev/fuse (CI has both): %v", err)
	}
}

// mount mounts a lazyfs over a backing directory holding files (path →
// content; a path ending in "/" is a directory), all durable.
func mount(t *testing.T, files map[string]string, opts Options) (fsys *FS, backing, mnt string) {
	t.Helper()
	skipUnlessAvailable(t)
	backing, mnt = t.TempDir(), t.TempDir()
	for p, content := range files {
		full := filepath.Join(backing, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fsys, err := Mount(backing, mnt, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if fsys.server != nil {
			fsys.Unmount()
		}
	})
	return fsys, backing, mnt
}

// tree lists what is under dir: path → content, directories as "path/".
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			out[rel+"/"] = ""
			return nil
		}
		data, err := os.ReadFile(p)
		out[rel] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	must(t, err)
	_, err = f.WriteString(content)
	must(t, err)
	if sync {
		must(t, f.Sync())
	}
	must(t, f.Close())
}

func appendFile(t *testing.T, path, content string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f.WriteString(content)
	must(t, err)
	if sync {
		must(t, f.Sync())
	}
	must(t, f.Close())
}

func syncDir(t *testing.T, path string) {
	t.Helper()
	d, err := os.Open(path)
	must(t, err)
	must(t, d.Sync())
	must(t, d.Close())
}

// TestCutPower holds the model to what a power cut may leave, one case per
// rule in the package documentation.
func TestCutPower(t *testing.T) {
	tests := []struct {
		name    string
		initial map[string]string
		opts    Options
		do      func(t *testing.T, mnt string)
		want    map[string]string
	}{{
		name:    "unsynced new file is gone",
		initial: map[string]string{"d/": ""},
		do:      func(t *testing.T, m string) { writeFile(t, m+"/d/a", "data", false) },
		want:    map[string]string{"d/": ""},
	}, {
		name:    "file synced, directory not: gone",
		initial: map[string]string{"d/": ""},
		do:      func(t *testing.T, m string) { writeFile(t, m+"/d/a", "data", true) },
		want:    map[string]string{"d/": ""},
	}, {
		name:    "directory synced, file not: empty",
		initial: map[string]string{"d/": ""},
		do: func(t *testing.T, m string) {
			writeFile(t, m+"/d/a", "data", false)
			syncDir(t, m+"/d")
		},
		want: map[string]string{"d/": "", "d/a": ""},
	}, {
		name:    "both synced: kept",
		initial: map[string]string{"d/": ""},
		do: func(t *testing.T, m string) {
			writeFile(t, m+"/d/a", "data", true)
			syncDir(t, m+"/d")
		},
		want: map[string]string{"d/": "", "d/a": "data"},
	}, {
		name:    "data after the last fsync is lost",
		initial: map[string]string{"a": "one"},
		do: func(t *testing.T, m string) {
			appendFile(t, m+"/a", "two", true)
			appendFile(t, m+"/a", "three", false)
		},
		want: map[string]string{"a": "onetwo"},
	}, {
		name:    "torn: a prefix of unsynced appends may stay",
		initial: map[string]string{"a": "one"},
		opts:    Options{Torn: true, Seed: 1},
		do:      func(t *testing.T, m string) { appendFile(t, m+"/a", "twothreefourfive", false) },
		want:    nil, // checked below: a prefix of the full content, at least "one"
	}, {
		name:    "rename without directory fsync is undone",
		initial: map[string]string{"old": "old data"},
		do: func(t *testing.T, m string) {
			writeFile(t, m+"/tmp", "new data", true)
			must(t, os.Rename(m+"/tmp", m+"/old"))
		},
		want: map[string]string{"old": "old data"},
	}, {
		name:    "rename with directory fsync is kept",
		initial: map[string]string{"old": "old data"},
		do: func(t *testing.T, m string) {
			writeFile(t, m+"/tmp", "new data", true)
			must(t, os.Rename(m+"/tmp", m+"/old"))
			syncDir(t, m)
		},
		want: map[string]string{"old": "new data"},
	}, {
		name:    "unsynced removal comes back with its synced data",
		initial: map[string]string{"a": "one"},
		do: func(t *testing.T, m string) {
			appendFile(t, m+"/a", "two", true)
			appendFile(t, m+"/a", "three", false)
			must(t, os.Remove(m+"/a"))
		},
		want: map[string]string{"a": "onetwo"},
	}, {
		name:    "directories are synced separately",
		initial: map[string]string{"x/": "", "y/": "", "x/a": "a"},
		do: func(t *testing.T, m string) {
			must(t, os.Rename(m+"/x/a", m+"/y/a"))
			syncDir(t, m+"/y")
		},
		// x was not synced: the old name is still durable too, the same file.
		want: map[string]string{"x/": "", "y/": "", "x/a": "a", "y/a": "a"},
	}, {
		name: "new directory needs its parent synced",
		do: func(t *testing.T, m string) {
			must(t, os.Mkdir(m+"/d", 0o755))
			writeFile(t, m+"/d/a", "data", true)
			syncDir(t, m+"/d")
		},
		want: map[string]string{},
	}, {
		name: "new directory with its parent synced",
		do: func(t *testing.T, m string) {
			must(t, os.Mkdir(m+"/d", 0o755))
			syncDir(t, m)
			writeFile(t, m+"/d/a", "data", true)
			syncDir(t, m+"/d")
		},
		want: map[string]string{"d/": "", "d/a": "data"},
	}, {
		name:    "IgnoreFsync: synced data is lost",
		initial: map[string]string{"a": "one"},
		opts:    Options{IgnoreFsync: true},
		do:      func(t *testing.T, m string) { appendFile(t, m+"/a", "two", true) },
		want:    map[string]string{"a": "one"},
	}, {
		name:    "IgnoreDirFsync: synced rename is lost",
		initial: map[string]string{"a": "one"},
		opts:    Options{IgnoreDirFsync: true},
		do: func(t *testing.T, m string) {
			must(t, os.Rename(m+"/a", m+"/b"))
			syncDir(t, m)
		},
		want: map[string]string{"a": "one"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys, backing, mnt := mount(t, tt.initial, tt.opts)
			tt.do(t, mnt)
			live := tree(t, backing)
			if _, err := fsys.CutPower(nil); err != nil {
				t.Fatal(err)
			}
			got := tree(t, backing)
			if tt.want == nil { // the torn case
				if !strings.HasPrefix(live["a"], got["a"]) || !strings.HasPrefix(got["a"], "one") {
					t.Fatalf("after the cut a = %q, want a prefix of %q starting with %q", got["a"], live["a"], "one")
				}
				return
			}
			if !equalTrees(got, tt.want) {
				t.Fatalf("after the cut:\n got %v\nwant %v\n(before: %v)", got, tt.want, live)
			}
		})
	}
}

func equalTrees(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestFailAt stops the file system at a chosen operation: the operations
// before it happen, it and the ones after fail, and the cut keeps exactly
// what was durable before it.
func TestFailAt(t *testing.T) {
	// The sequence of a durable replace: create, write, fsync, rename,
	// fsync of the directory (5 mutating operations).
	replace := func(mnt string) error {
		f, err := os.OpenFile(mnt+"/.a.tmp", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.WriteString("new"); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		if err := os.Rename(mnt+"/.a.tmp", mnt+"/a"); err != nil {
			return err
		}
		d, err := os.Open(mnt)
		if err != nil {
			return err
		}
		defer d.Close()
		return d.Sync()
	}
	wantKinds := []OpKind{OpCreate, OpWrite, OpFsync, OpRename, OpFsyncDir}
	for failAt := 1; failAt <= len(wantKinds)+1; failAt++ {
		fsys, backing, mnt := mount(t, map[string]string{"a": "old"}, Options{FailAt: failAt, Trace: true})
		done := make(chan error, 1)
		go func() { done <- replace(mnt) }()
		if failAt <= len(wantKinds) {
			<-fsys.Frozen()
		} else if err := <-done; err != nil {
			t.Fatalf("FailAt %d: the whole sequence should have run: %v", failAt, err)
		}
		cut, err := fsys.CutPower(nil)
		if err != nil {
			t.Fatal(err)
		}
		if failAt <= len(wantKinds) {
			if err := <-done; !errors.Is(err, syscall.EIO) {
				t.Errorf("FailAt %d: the stopped operation returned %v, want EIO", failAt, err)
			}
			if cut.Stopped == nil || cut.Stopped.Index != failAt || cut.Stopped.Kind != wantKinds[failAt-1] {
				t.Errorf("FailAt %d: stopped %v, want #%d %s", failAt, cut.Stopped, failAt, wantKinds[failAt-1])
			}
		}
		if cut.Ops != failAt-1 {
			t.Errorf("FailAt %d: %d operations performed, want %d", failAt, cut.Ops, failAt-1)
		}
		var kinds []OpKind
		for _, op := range fsys.Trace() {
			kinds = append(kinds, op.Kind)
		}
		if !slices.Equal(kinds, wantKinds[:failAt-1]) {
			t.Errorf("FailAt %d: trace %v, want %v", failAt, kinds, wantKinds[:failAt-1])
		}
		// Only the directory fsync makes the replace durable.
		want := "old"
		if failAt > len(wantKinds) {
			want = "new"
		}
		got := tree(t, backing)
		names := make([]string, 0, len(got))
		for k := range got {
			names = append(names, k)
		}
		sort.Strings(names)
		if got["a"] != want || len(got) != 1 {
			t.Errorf("FailAt %d: after the cut %v (a = %q), want only a = %q", failAt, names, got["a"], want)
		}
	}
}

func TestMountRefusesSymlinks(t *testing.T) {
	skipUnlessAvailable(t)
	backing := t.TempDir()
	must(t, os.Symlink("/etc/passwd", filepath.Join(backing, "link")))
	_, err := Mount(backing, t.TempDir(), Options{})
	if err == nil || !strings.Contains(err.Error(), "link") {
		t.Fatalf("Mount over a symbolic link: %v, want an error naming it", err)
	}
}
