package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/dranode/dranode/tools/envtest/childproc"
)

// process is a node component (childproc: its own process group, killed
// with the test binary), its output in <dir>/<name>.log (appended across
// restarts), its TMPDIR <dir>/tmp.
type process struct{ *childproc.Process }

// startProcess starts a node component in the node's directory dir. Its
// TMPDIR is the node's own, as a real node's /tmp is: what a component
// stopped at the wrong moment leaves there goes with the node directory,
// not into the test's TMPDIR, where make check counts it against the
// step (the kubelet makes and removes a kubelet-detect-safe-umount
// directory at each start).
func startProcess(name, bin string, args []string, dir string, env []string) (*process, error) {
	f, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own descriptor
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(append(os.Environ(), "TMPDIR="+tmp), env...)
	p, err := childproc.Start(name, cmd)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	return &process{p}, nil
}
