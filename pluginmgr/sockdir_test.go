package pluginmgr

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestRemoveStaleSocketDirs: only a socket directory that is old and whose
// sockets all refuse connections (or that has none) is removed; one a
// plugin listens in, one too new to judge, one holding something else and
// any other directory stay.
func TestRemoveStaleSocketDirs(t *testing.T) {
	tmp := t.TempDir()
	now := time.Now()
	old := now.Add(-2 * staleSocketDirAge)
	mkdir := func(name string, mtime time.Time, fill func(dir string)) string {
		t.Helper()
		dir := filepath.Join(tmp, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if fill != nil {
			fill(dir)
		}
		if err := os.Chtimes(dir, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	listen := func(path string) *net.UnixListener {
		t.Helper()
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// A dead plugin's socket: the file stays, nothing listens.
	dead := func(dir string) {
		l := listen(filepath.Join(dir, "plugin1"))
		l.SetUnlinkOnClose(false)
		l.Close()
	}
	live := listen(filepath.Join(mkdir(socketDirPrefix+"live", old, nil), "plugin2"))
	defer live.Close()
	os.Chtimes(filepath.Join(tmp, socketDirPrefix+"live"), old, old) // the socket made it new again

	removed := []string{
		mkdir(socketDirPrefix+"dead", old, dead),
		mkdir(socketDirPrefix+"empty", old, nil),
	}
	kept := []string{
		filepath.Join(tmp, socketDirPrefix+"live"),
		mkdir(socketDirPrefix+"new", now, dead),
		mkdir(socketDirPrefix+"file", old, func(dir string) {
			if err := os.WriteFile(filepath.Join(dir, "notes"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}),
		mkdir("other-dead", old, dead),
	}
	removeStaleSocketDirs(tmp, now, hclog.NewNullLogger())
	for _, dir := range removed {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s: stat = %v, want it removed", filepath.Base(dir), err)
		}
	}
	for _, dir := range kept {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s: %v, want it kept", filepath.Base(dir), err)
		}
	}
}

// TestMakeSocketDirRemovesStaleOnes: the directory Launch makes is a new
// one under os.TempDir, and making it removes a dead one.
func TestMakeSocketDirRemovesStaleOnes(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	stale := filepath.Join(tmp, socketDirPrefix+"stale")
	if err := os.Mkdir(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * staleSocketDirAge)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	dir, err := makeSocketDir(hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(dir) != tmp {
		t.Errorf("socket directory %s, want one under %s", dir, tmp)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale directory: stat = %v, want it removed", err)
	}
}
