package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The access(2) modes CheckNode asks about.
const (
	accessRead   = 0x4
	accessWrite  = 0x2
	accessSearch = 0x1
)

// CheckNode checks cfg against the machine it runs on, as far as that can be
// done without the API server and without creating or changing anything: what
// the agent would refuse at start, or fail on the first time it used the
// path. bootIDFile is a readable regular file that is not empty; kubeconfig
// loads (in a pod without one, the in-cluster configuration); stateDir, the
// kubelet directories, cdi.dir and, in standalone mode, slices.dryRunDir are
// directories the process can write, or can create (the nearest existing
// parent is a directory it can write); a claim record already in stateDir is
// a writable directory; claims.dir, if it exists in standalone mode, is a
// readable directory; http.address's host, if an IP address, is one of this
// machine's. The plugin binaries are CheckPluginBinaries's.
//
// It returns the checks it could not make, one line each naming the key
// ("kubeconfig: whether the API server ... answers ..."), and an error
// joining one *ConfigError per key that failed (or Validate's error).
func CheckNode(cfg Config) (notChecked []string, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var errs []error
	fail := func(key string, err error) {
		errs = append(errs, &ConfigError{Key: key, Reason: err.Error(), Err: err})
	}
	skip := func(format string, args ...any) {
		notChecked = append(notChecked, fmt.Sprintf(format, args...))
	}

	if err := checkBootIDFile(cfg.BootIDFile); err != nil {
		fail("bootIDFile", err)
	}
	// The mode, chosen as Start chooses it.
	standalone := false
	switch {
	case cfg.Kubeconfig != "":
		if rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig); err != nil {
			fail("kubeconfig", err)
		} else {
			skip("kubeconfig: whether the API server %s answers and accepts the credentials (needs the API server)", rc.Host)
		}
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		if rc, err := rest.InClusterConfig(); err != nil {
			fail("kubeconfig", fmt.Errorf("empty, and the in-cluster configuration cannot be used: %w", err))
		} else {
			skip("kubeconfig: empty, in-cluster: whether the API server %s answers and accepts the service account (needs the API server)", rc.Host)
		}
	default:
		standalone = true
	}

	dirs := []struct{ key, path string }{
		{"stateDir", cfg.StateDir},
		{"kubelet.registryDir", cfg.Kubelet.RegistryDir},
		{"kubelet.pluginsDir", cfg.Kubelet.PluginsDir},
		{"cdi.dir", cfg.CDI.Dir},
	}
	if standalone {
		dirs = append(dirs, struct{ key, path string }{"slices.dryRunDir", cfg.Slices.DryRunDir})
	}
	for _, d := range dirs {
		checked, err := checkWritableDir(d.path)
		switch {
		case err != nil:
			fail(d.key, err)
		case !checked:
			skip("%s: whether %s is writable (not asked on %s)", d.key, d.path, runtime.GOOS)
		case d.key == "stateDir":
			// The claim record, if there is one already.
			record := filepath.Join(cfg.StateDir, claimRecordDir)
			if _, err := os.Lstat(record); err == nil {
				if _, err := checkWritableDir(record); err != nil {
					fail(d.key, fmt.Errorf("the claim record: %w", err))
				}
			}
		}
	}
	if standalone {
		if fi, err := os.Stat(cfg.Claims.Dir); err == nil {
			if !fi.IsDir() {
				fail("claims.dir", fmt.Errorf("%s is not a directory", cfg.Claims.Dir))
			} else if _, err := canAccess(cfg.Claims.Dir, accessRead|accessSearch); err != nil {
				fail("claims.dir", fmt.Errorf("%s is not readable (%w)", cfg.Claims.Dir, err))
			}
		}
	}

	if cfg.HTTP.Address != "" {
		host, port, _ := net.SplitHostPort(cfg.HTTP.Address) // Validate checked it
		if ip := net.ParseIP(host); ip != nil {
			if !ip.IsUnspecified() && !ip.IsLoopback() && !isLocalAddress(ip) {
				fail("http.address", fmt.Errorf("%s is not an address of this machine", host))
			}
		} else if host != "" {
			skip("http.address: whether %q names an address of this machine (needs name resolution)", host)
		}
		if port != "" && port != "0" {
			skip("http.address: whether port %s is free (an agent running now holds it)", port)
		}
	}
	skip("plugins.drivers: whether each plugin starts and answers (needs running it)")
	return notChecked, errors.Join(errs...)
}

// checkBootIDFile fails where Start's reading of the boot ID would, without
// reading more than a boot ID's worth (or blocking on a FIFO).
func checkBootIDFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(data)) == "" {
		return fmt.Errorf("%s is empty", path)
	}
	return nil
}

// checkWritableDir reports whether the process could create dir, as
// os.MkdirAll does, and write in it, without creating anything: dir is a
// directory it can write and search, or dir's nearest existing parent is.
// checked is false where the platform cannot be asked.
func checkWritableDir(dir string) (checked bool, err error) {
	for p := dir; ; {
		fi, err := os.Stat(p)
		if err == nil {
			what := p + " is"
			if p != dir {
				what = fmt.Sprintf("%s cannot be created: %s is", dir, p)
			}
			if !fi.IsDir() {
				return true, fmt.Errorf("%s not a directory", what)
			}
			checked, err := canAccess(p, accessWrite|accessSearch)
			if err != nil {
				return true, fmt.Errorf("%s not writable (%w)", what, err)
			}
			return checked, nil
		}
		if errors.Is(err, fs.ErrPermission) {
			return true, err
		}
		// Missing, or under a file: look at the parent.
		parent := filepath.Dir(p)
		if parent == p {
			return true, err
		}
		p = parent
	}
}

func isLocalAddress(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell; Start will
	}
	return slices.ContainsFunc(addrs, func(a net.Addr) bool {
		n, ok := a.(*net.IPNet)
		return ok && n.IP.Equal(ip)
	})
}
