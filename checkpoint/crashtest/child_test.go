package crashtest_test

import (
	"debug/buildinfo"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/dranode/dranode/checkpoint/crashtest"
)

const roleEnv = "CRASHTEST_TEST_ROLE"

var child crashtest.Child

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "child" {
		os.Stdout.WriteString("child ran\n")
		os.Exit(0)
	}
	os.Exit(child.Run(m))
}

func race(t *testing.T, path string) bool {
	t.Helper()
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// TestChildIsPlainAndRuns: the child binary has no race detector, is the
// same package's test binary (its TestMain takes the child role) and is
// built once.
func TestChildIsPlainAndRuns(t *testing.T) {
	path := child.Path(t)
	if race(t, path) {
		t.Errorf("%s has the race detector", path)
	}
	if race(t, os.Args[0]) == (path == os.Args[0]) {
		t.Errorf("child %s, running binary %s (race %v): want a build exactly when the running one has -race",
			path, os.Args[0], race(t, os.Args[0]))
	}
	cmd := exec.Command(path)
	cmd.Env = append(os.Environ(), roleEnv+"=child")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "child ran" {
		t.Fatalf("child: %v, output %q", err, out)
	}
	if again := child.Path(t); again != path {
		t.Errorf("second Path %s, first %s", again, path)
	}
}

// TestRemove: Remove deletes a built child and leaves the running binary.
func TestRemove(t *testing.T) {
	var c crashtest.Child
	path := c.Path(t)
	if err := c.Remove(); err != nil {
		t.Fatal(err)
	}
	_, err := os.Stat(path)
	switch {
	case path == os.Args[0] && err != nil:
		t.Errorf("Remove touched the running binary: %v", err)
	case path != os.Args[0] && !errors.Is(err, fs.ErrNotExist):
		t.Errorf("built child %s still there after Remove: %v", path, err)
	}
	var unused crashtest.Child
	if err := unused.Remove(); err != nil {
		t.Errorf("Remove without Path: %v", err)
	}
}

// TestBuildFailure: where the package cannot be built, Path fails the test
// naming the directory and the go command's complaint. It runs in a child
// (a failing Path ends the test that called it).
func TestBuildFailure(t *testing.T) {
	if dir := os.Getenv("CRASHTEST_TEST_BROKEN_DIR"); dir != "" {
		t.Chdir(dir)
		var c crashtest.Child
		defer c.Remove()
		c.Path(t)
		t.Fatal("Path returned in a directory without a package")
	}
	if !race(t, os.Args[0]) {
		t.Skip("without -race, Path builds nothing")
	}
	broken := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBuildFailure$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CRASHTEST_TEST_BROKEN_DIR="+broken)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("child passed:\n%s", out)
	}
	for _, want := range []string{"building the child test binary without -race in " + broken, "go test -c"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
