package testbin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dranode/dranode/pluginmgr/plugintest"
)

// Main is a TestMain that needs plugin binaries: it builds the main package
// of each key of pkgs into a temporary directory, stores the binary's path
// where the value points, runs the tests, removes the directory and exits
// with the tests' code.
func Main(m *testing.M, pkgs map[string]*string) {
	dir, err := os.MkdirTemp("", "pluginmgr-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for pkg, path := range pkgs {
		if *path, err = Build(dir, filepath.Base(pkg), pkg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Build builds the main package pkg (relative to the test's directory)
// into dir/name with plugintest.Build and returns the binary's path.
func Build(dir, name, pkg string) (string, error) {
	return BuildIn("", dir, name, pkg)
}

// BuildIn is Build run in the directory src (the test's directory when
// empty), for plugins built from another copy of the module, such as a
// released version.
func BuildIn(src, dir, name, pkg string) (string, error) {
	return plugintest.Build(context.Background(), src, pkg, filepath.Join(dir, name))
}

// SHA256 is the hex SHA-256 digest of the file at path. It panics when the
// file cannot be read: its callers digest binaries they just built.
func SHA256(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		panic(fmt.Sprintf("testbin: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
