package envtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
)

// Versions of the control plane that scripts/build-controlplane.sh builds;
// they name the cache directory, so they must match the pinned go.mod files
// in build/controlplane (a test checks that they do).
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.7.0"
)

// BinaryDirEnv names the environment variable that points at a directory of
// prebuilt etcd, kube-apiserver, kube-scheduler and kube-controller-manager
// binaries (Start needs only those it starts).
const BinaryDirEnv = "DRANODE_CONTROLPLANE_BIN"

// Names of the binaries in a binary directory.
const (
	EtcdBinary      = "etcd"
	APIServerBinary = "kube-apiserver"
	SchedulerBinary = "kube-scheduler"

	ControllerManagerBinary = "kube-controller-manager"
)

// ErrBinariesNotFound is matched (errors.Is) by every *BinaryError.
var ErrBinariesNotFound = errors.New("control-plane binaries not found")

// BinaryError reports a control-plane binary that is missing or not
// executable, where it was looked for and how that place was chosen.
type BinaryError struct {
	Dir    string // the directory searched
	Source string // why that directory: "Environment.BinaryDir", "$DRANODE_CONTROLPLANE_BIN" or "build cache"
	Binary string // the binary that is missing
	Err    error  // from os.Stat, or a description of what is wrong with the file
}

func (e *BinaryError) Error() string {
	return fmt.Sprintf("envtest: %s not usable in %s (from %s): %v; build the control plane with "+
		"\"make controlplane\" (scripts/build-controlplane.sh) at the repository root, or set %s "+
		"to a directory holding %s, %s, %s and %s",
		e.Binary, e.Dir, e.Source, e.Err, BinaryDirEnv, EtcdBinary, APIServerBinary, SchedulerBinary, ControllerManagerBinary)
}

// Is makes errors.Is(err, ErrBinariesNotFound) true.
func (e *BinaryError) Is(target error) bool { return target == ErrBinariesNotFound }

func (e *BinaryError) Unwrap() error { return e.Err }

// CacheKey is the name of the build-cache directory for these versions built
// by the given Go version (runtime.Version() form, e.g. "go1.26.8").
// scripts/build-controlplane.sh computes the same name.
func CacheKey(goVersion string) string {
	return "kubernetes-" + KubernetesVersion + "_etcd-" + EtcdVersion + "_" + goVersion
}

// CacheRoot is the directory under which the build script keeps one
// subdirectory per CacheKey: $XDG_CACHE_HOME/dranode/controlplane, or
// $HOME/.cache/dranode/controlplane.
func CacheRoot() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("envtest: locating the user cache directory: %w", err)
	}
	return filepath.Join(dir, "dranode", "controlplane"), nil
}

// DefaultBinaryDir is where Start looks for binaries when
// Environment.BinaryDir is empty, and the reason (source) it looks there:
// $DRANODE_CONTROLPLANE_BIN when set, else the build cache entry for this
// Go version, else — the same Kubernetes and etcd versions built by another
// Go version being just as good — the newest such entry.
func DefaultBinaryDir() (dir, source string, err error) {
	if d := os.Getenv(BinaryDirEnv); d != "" {
		return d, "$" + BinaryDirEnv, nil
	}
	root, err := CacheRoot()
	if err != nil {
		return "", "", err
	}
	exact := filepath.Join(root, CacheKey(runtime.Version()))
	if _, err := os.Stat(exact); err == nil {
		return exact, "build cache", nil
	}
	others, _ := filepath.Glob(filepath.Join(root, CacheKey("go*")))
	if len(others) > 0 {
		sort.Strings(others)
		return others[len(others)-1], "build cache (built by another Go version)", nil
	}
	return exact, "build cache", nil
}

// resolveBinaries returns the absolute path of each needed binary, or a
// *BinaryError for the first one that is unusable.
func (e *Environment) resolveBinaries(names ...string) (map[string]string, error) {
	dir, source := e.BinaryDir, "Environment.BinaryDir"
	if dir == "" {
		var err error
		if dir, source, err = DefaultBinaryDir(); err != nil {
			return nil, err
		}
	}
	paths := make(map[string]string, len(names))
	for _, name := range names {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			return nil, &BinaryError{Dir: dir, Source: source, Binary: name, Err: err}
		case !fi.Mode().IsRegular():
			return nil, &BinaryError{Dir: dir, Source: source, Binary: name, Err: fmt.Errorf("%s is not a regular file", p)}
		case fi.Mode().Perm()&0o111 == 0:
			return nil, &BinaryError{Dir: dir, Source: source, Binary: name, Err: fmt.Errorf("%s is not executable", p)}
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("envtest: %s: %w", p, err)
		}
		paths[name] = abs
	}
	return paths, nil
}
