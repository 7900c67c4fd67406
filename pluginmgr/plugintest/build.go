package plugintest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildError is a failed Build: the package, the module directory it was
// built in and what the go command printed.
type BuildError struct {
	Dir, Package string
	Output       string
	Err          error
}

func (e *BuildError) Error() string {
	return fmt.Sprintf("building %s in %s: %v\n%s", e.Package, e.Dir, e.Err, strings.TrimSpace(e.Output))
}

func (e *BuildError) Unwrap() error { return e.Err }

// Build compiles the main package pkg (as the go command takes it, such as
// "./cmd/my-plugin", relative to dir) of the module in dir into the file
// out, and returns out as an absolute path. dir "" is the current
// directory.
//
// The module is built alone (GOWORK=off) and without cgo (CGO_ENABLED=0),
// as the images build it; the rest of the environment is the caller's, so
// GOFLAGS (-race, -trimpath, -ldflags) and GOCACHE apply. The binary is
// the go command's cached executable for these inputs when it has one,
// otherwise linked and cached for the next Build: go run -exec copies it to
// out. It is the binary go build would write, without the version control
// stamp (vcs.* in its build information), which go run never records.
//
// out is replaced if it exists, and its directory made if it does not (as
// go build -o does). A failure is a *BuildError with the go command's
// output.
func Build(ctx context.Context, dir, pkg, out string) (string, error) {
	abs, err := filepath.Abs(out)
	if err != nil {
		return "", err
	}
	if pkg == "" {
		return "", &BuildError{Dir: dir, Package: pkg, Err: errors.New("no package given")}
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return "", &BuildError{Dir: dir, Package: pkg, Err: err}
	}
	// go run -exec X pkg args runs "X <binary> args": cp (POSIX, no GNU
	// flags: vendors run this on macOS too) copies the binary, from the
	// cache or from go run's temporary directory (removed when go run
	// returns), next to out; the rename then replaces out whole, even a
	// binary that is running, and a failed build leaves out as it was.
	tmp, err := os.CreateTemp(filepath.Dir(abs), "."+filepath.Base(abs)+".tmp-")
	if err != nil {
		return "", &BuildError{Dir: dir, Package: pkg, Err: err}
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.CommandContext(ctx, "go", "run", "-exec", "cp", pkg, tmp.Name())
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	output, err := cmd.CombinedOutput()
	if err != nil {
		return "", &BuildError{Dir: dir, Package: pkg, Output: string(output), Err: err}
	}
	// cp kept the mode CreateTemp gave (0600).
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return "", &BuildError{Dir: dir, Package: pkg, Err: err}
	}
	if err := os.Rename(tmp.Name(), abs); err != nil {
		return "", &BuildError{Dir: dir, Package: pkg, Err: err}
	}
	return abs, nil
}
