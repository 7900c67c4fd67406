package crashtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
)

// Child is the test binary to start as a crash test's child: the running
// one when it has no race detector, otherwise the running package's test
// binary built once, on first use, without it. The zero value is ready;
// keep one per test binary (a package variable) and end TestMain with
// os.Exit(child.Run(m)).
type Child struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Path returns the child binary's path, building it on the first call. A
// test's working directory is its package's directory: that package is
// built, with the go command on PATH and the caller's environment (GOFLAGS,
// GOWORK, GOCACHE apply; a -race there makes the child instrumented after
// all). A failed build fails tb with the go command's output.
func (c *Child) Path(tb testing.TB) string {
	tb.Helper()
	c.once.Do(func() {
		if !raceEnabled() {
			c.path = os.Args[0]
			return
		}
		c.path, c.err = c.build()
	})
	if c.err != nil {
		tb.Fatalf("crashtest: %v", c.err)
	}
	return c.path
}

func (c *Child) build() (string, error) {
	dir, err := os.MkdirTemp("", "crashtest-")
	if err != nil {
		return "", err
	}
	c.dir = dir
	out := filepath.Join(dir, filepath.Base(os.Args[0]))
	cmd := exec.Command("go", "test", "-c", "-o", out, ".")
	if output, err := cmd.CombinedOutput(); err != nil {
		wd, _ := os.Getwd()
		return "", fmt.Errorf("building the child test binary without -race in %s (go test -c): %w\n%s", wd, err, strings.TrimSpace(string(output)))
	}
	return out, nil
}

// Run is TestMain's m.Run followed by Remove: it returns the tests' exit
// code, or 1 when the built binary could not be removed (the reason on
// standard error).
func (c *Child) Run(m *testing.M) int {
	code := m.Run()
	if err := c.Remove(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return code
}

// Remove deletes a binary that Path built; the running binary is left
// alone. It is safe to call when Path was never called.
func (c *Child) Remove() error {
	c.once.Do(func() {}) // no build may start after Remove
	if c.dir == "" {
		return nil
	}
	return os.RemoveAll(c.dir)
}

// raceEnabled reports whether the running binary was built with -race.
func raceEnabled() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}
