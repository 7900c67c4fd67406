package envtest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// These tests run scripts/build-controlplane.sh against a cache directory of
// their own, with fake binaries: what it does with a complete cache, a stale
// one and a failing build, without spending ten minutes building.

const script = "../../scripts/build-controlplane.sh"

// manifest is what the script records of the modules it builds from.
func manifest(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, f := range []string{"build/controlplane/go.mod", "build/controlplane/go.sum", "build/controlplane/etcd/go.mod", "build/controlplane/etcd/go.sum"} {
		data, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(sum[:]), f)
	}
	return b.String()
}

// fakeCache makes a cache entry with stand-in binaries and the given
// manifest, and returns its directory.
func fakeCache(t *testing.T, manifestText string) string {
	t.Helper()
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv(BinaryDirEnv, "")
	out, err := exec.Command(script, "--print-dir").Output()
	if err != nil {
		t.Fatalf("--print-dir: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{EtcdBinary, APIServerBinary, SchedulerBinary} {
		writeExecutable(t, filepath.Join(dir, b), 0o755)
	}
	if err := os.WriteFile(filepath.Join(dir, "MANIFEST"), []byte(manifestText), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// failingGo puts a "go" first in PATH that answers "env GOVERSION" like the
// real one and fails every build, and returns the log of its calls.
func failingGo(t *testing.T) string {
	t.Helper()
	real, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	calls := filepath.Join(bin, "calls.log")
	fake := fmt.Sprintf("#!/bin/sh\necho \"$@\" >> %s\ncase \"$1\" in build) echo 'fake go: build refused' >&2; exit 3;; esac\nexec %s \"$@\"\n", calls, real)
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return calls
}

func TestScriptReusesCompleteCache(t *testing.T) {
	dir := fakeCache(t, manifest(t))
	calls := failingGo(t)
	out, err := exec.Command(script).Output()
	if err != nil {
		t.Fatalf("script with a complete cache: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != dir {
		t.Errorf("script printed %q, want %q", got, dir)
	}
	log, _ := os.ReadFile(calls)
	if strings.Contains("\n"+string(log), "\nbuild ") {
		t.Errorf("script built with a complete cache; go calls:\n%s", log)
	}
}

// A stale cache is rebuilt; a build that fails leaves the old entry as it
// was and no half-built directory behind.
func TestScriptFailedRebuildKeepsOldCache(t *testing.T) {
	dir := fakeCache(t, "stale manifest\n")
	failingGo(t)
	cmd := exec.Command(script)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("script with a failing go build: %v, want a non-zero exit\n%s", err, out)
	}
	if !strings.Contains(string(out), "building etcd") || !strings.Contains(string(out), "failed") {
		t.Errorf("output does not say what failed:\n%s", out)
	}
	if m, err := os.ReadFile(filepath.Join(dir, "MANIFEST")); err != nil || string(m) != "stale manifest\n" {
		t.Errorf("old cache entry changed: MANIFEST %q, %v", m, err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), ".build-*"))
	if len(leftovers) != 0 {
		t.Errorf("half-built directories left: %v", leftovers)
	}
}

func TestScriptChecksPrebuiltDirectory(t *testing.T) {
	for _, tc := range []struct {
		name     string
		binaries []string
		wantOK   bool
	}{
		{"complete", []string{EtcdBinary, APIServerBinary, SchedulerBinary}, true},
		{"scheduler missing", []string{EtcdBinary, APIServerBinary}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, b := range tc.binaries {
				writeExecutable(t, filepath.Join(dir, b), 0o755)
			}
			t.Setenv(BinaryDirEnv, dir)
			out, err := exec.Command(script).CombinedOutput()
			if (err == nil) != tc.wantOK {
				t.Fatalf("script: %v, want success %v\n%s", err, tc.wantOK, out)
			}
			if tc.wantOK && strings.TrimSpace(string(out)) != dir {
				t.Errorf("printed %q, want %q", out, dir)
			}
			if !tc.wantOK && !strings.Contains(string(out), BinaryDirEnv) {
				t.Errorf("error does not name %s:\n%s", BinaryDirEnv, out)
			}
		})
	}
}
