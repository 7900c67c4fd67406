// Package clibin builds the image command once per test process, without
// the race detector, for the tests that check what whole builds produce.
//
// Under "go test -race" an in-process build runs the layers' compression
// and hashing instrumented, five to seven times slower: one build of the
// agent image took 184 s that way and 27 s in a plain binary. The builder's
// concurrency keeps its race-detector coverage from the builds the images
// package's tests make in process; the tests that only compare outputs
// (reproducibility, the command line) run this binary, which is also how
// "make image" and a user run it.
package clibin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

var (
	once sync.Once
	dir  string
	bin  string
	err  error
)

// Path returns the image command built from the module at root's
// scripts/image, once per process. Call Cleanup once, from TestMain, after
// every test: a binary removed earlier is not built again.
func Path(root string) (string, error) {
	once.Do(func() {
		dir, err = os.MkdirTemp("", "image-cli-")
		if err != nil {
			return
		}
		bin = filepath.Join(dir, "image")
		cmd := exec.Command("go", "build", "-o", bin, ".")
		cmd.Dir = filepath.Join(root, "scripts", "image")
		// The module is outside go.work.
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, berr := cmd.CombinedOutput(); berr != nil {
			err = fmt.Errorf("go build of the image command: %w\n%s", berr, out)
		}
	})
	return bin, err
}

// Cleanup removes the binary Path built, if any.
func Cleanup() {
	if dir != "" {
		os.RemoveAll(dir)
	}
}
