package harness

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Binaries are the programs of a node, as scripts/build-node.sh lays them
// out (its node.env names each).
type Binaries struct {
	Dir string
	// KubernetesVersion is the kubelet's release, e.g. v1.34.4.
	KubernetesVersion string
	Kubelet           string
	Containerd        string
	Shim              string // containerd-shim-runc-v2; containerd finds it on PATH
	Ctr               string
	Runc              string
	CNIBinDir         string
}

// ErrBinariesNotFound is wrapped by FindBinaries' errors.
var ErrBinariesNotFound = errors.New("node binaries not found")

// FindBinaries reads node.env from $DRANODE_NODE_BIN or from the directory
// scripts/build-node.sh --print-dir names (it builds nothing); run
// "make node" at the repository root to build them.
func FindBinaries() (*Binaries, error) {
	dir := os.Getenv("DRANODE_NODE_BIN")
	if dir == "" {
		script := filepath.Join(repoRoot(), "scripts", "build-node.sh")
		out, err := exec.Command(script, "--print-dir").Output()
		if err != nil {
			return nil, fmt.Errorf("harness: %w: %s --print-dir: %v", ErrBinariesNotFound, script, err)
		}
		dir = strings.TrimSpace(string(out))
	}
	return ReadBinaries(dir)
}

// ReadBinaries reads dir/node.env and checks every program it names.
func ReadBinaries(dir string) (*Binaries, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "node.env"))
	if err != nil {
		return nil, fmt.Errorf("harness: %w in %s (run \"make node\" at the repository root): %v", ErrBinariesNotFound, dir, err)
	}
	env := map[string]string{}
	s := bufio.NewScanner(bytes.NewReader(raw))
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), "="); ok {
			env[k] = v
		}
	}
	b := &Binaries{Dir: dir, KubernetesVersion: env["KUBERNETES_VERSION"], Kubelet: env["KUBELET"], Containerd: env["CONTAINERD"], Shim: env["CONTAINERD_SHIM_RUNC_V2"], Ctr: env["CTR"], Runc: env["RUNC"], CNIBinDir: env["CNI_BIN_DIR"]}
	for name, p := range map[string]string{"KUBELET": b.Kubelet, "CONTAINERD": b.Containerd, "CONTAINERD_SHIM_RUNC_V2": b.Shim, "CTR": b.Ctr, "RUNC": b.Runc} {
		fi, err := os.Stat(p)
		if p == "" || err != nil || fi.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("harness: %w: %s=%q in %s/node.env is not an executable file", ErrBinariesNotFound, name, p, dir)
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(b.CNIBinDir, plugin)); err != nil {
			return nil, fmt.Errorf("harness: %w: CNI plugin %s in CNI_BIN_DIR=%q: %v", ErrBinariesNotFound, plugin, b.CNIBinDir, err)
		}
	}
	return b, nil
}

// repoRoot is the repository the test runs in: the nearest directory up
// from the working directory (go test's is the package's) that holds
// versions.yaml. Not the source file's path from runtime.Caller: make
// check builds with -trimpath, which leaves only the import path there.
func repoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "versions.yaml")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}
