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
// restarts).
type process struct{ *childproc.Process }

func startProcess(name, bin string, args []string, dir string, env []string) (*process, error) {
	f, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	p, err := childproc.Start(name, cmd)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	return &process{p}, nil
}
