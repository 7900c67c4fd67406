package plugintest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dranode/dranode/pluginmgr/plugintest"
)

func TestBuildRunsAndIsCached(t *testing.T) {
	// Link inputs no earlier run had (an -X of a variable hello does not
	// have changes only the link's cache key), so that the cache can only
	// hold the binary because this Build put it there.
	nonce := strconv.FormatInt(time.Now().UnixNano(), 10)
	t.Logf("link nonce %s", nonce)
	t.Setenv("GOFLAGS", strings.TrimSpace(os.Getenv("GOFLAGS")+" -ldflags=-X=main.plugintestNonce="+nonce))
	out := filepath.Join(t.TempDir(), "hello")
	// Whatever is at out is replaced.
	if err := os.WriteFile(out, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := plugintest.Build(context.Background(), "testdata/hello", ".", out)
	if err != nil {
		t.Fatal(err)
	}
	if got != out {
		t.Errorf("Build returned %s, want %s", got, out)
	}
	run, err := exec.Command(got, "a", "b").Output()
	if err != nil {
		t.Fatalf("running the binary: %v", err)
	}
	if want := "hello [a b] CGO_ENABLED=0\n"; string(run) != want {
		t.Errorf("the binary printed %q, want %q", run, want)
	}

	// The go command's cache holds it now: the next Build copies it,
	// byte for byte.
	cached := goRun(t, "testdata/hello", "run", "-exec", "echo", ".")
	cache := strings.TrimSpace(goRun(t, ".", "env", "GOCACHE"))
	if !strings.HasPrefix(strings.TrimSpace(cached), cache+string(filepath.Separator)) {
		t.Errorf("after Build, go run's executable is %s, not in the cache %s", cached, cache)
	}
	// Into a directory that does not exist yet, as go build -o makes it.
	again, err := plugintest.Build(context.Background(), "testdata/hello", ".", filepath.Join(t.TempDir(), "new", "bin", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := read(t, got), read(t, again); string(a) != string(b) {
		t.Errorf("two builds of the same package differ (%d and %d bytes)", len(a), len(b))
	}
}

func TestBuildErrors(t *testing.T) {
	tests := []struct {
		name, dir, pkg string
		want           string // in the error
	}{
		{"compile error", "testdata/broken", ".", "undefinedOnPurpose"},
		{"no main package", "testdata/notmain", ".", "not a main package"},
		{"no such package", ".", "./testdata/nothing-here", "nothing-here"},
		{"no package", ".", "", "no package given"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "bin")
			_, err := plugintest.Build(context.Background(), tc.dir, tc.pkg, out)
			var be *plugintest.BuildError
			if !errors.As(err, &be) {
				t.Fatalf("err = %v, want a *BuildError", err)
			}
			if be.Package != tc.pkg || be.Dir != tc.dir {
				t.Errorf("BuildError names %q in %q, want %q in %q", be.Package, be.Dir, tc.pkg, tc.dir)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a failed build left %s (%v)", out, err)
			}
		})
	}
}

func goRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %v: %v", args, err)
	}
	return string(out)
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
