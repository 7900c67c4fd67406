package config

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
	"syscall"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dranode/dranode/checkpoint/kubeletcompat"
	"github.com/dranode/dranode/pluginmgr"
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
// readable directory; kubelet.draManagerState, if it exists, is a kubelet
// checkpoint the process can read, and in cluster mode with the sweep on it
// must exist (a running kubelet always has one); http.address's host, if an
// IP address, is one of this machine's, and its port is tried (bound for a
// moment and let go). The plugin binaries are CheckPluginBinaries's.
//
// The report says what was found that refuses nothing (a port in use, a
// kubelet checkpoint standalone mode goes without) and which checks could
// not be made, one line each naming the key; the error joins one
// *Error per key that failed (or is Validate's error).
func CheckNode(cfg Config) (NodeReport, error) {
	if err := cfg.Validate(); err != nil {
		return NodeReport{}, err
	}
	n := &nodeCheck{cfg: cfg}
	if err := checkBootIDFile(cfg.BootIDFile); err != nil {
		n.fail("bootIDFile", err)
	}
	n.mode()
	n.directories()
	n.kubeletCheckpoint()
	n.httpAddress()
	n.skip("plugins.drivers: whether each plugin starts and answers (needs running it)")
	return n.report, errors.Join(n.errs...)
}

// NodeReport is what CheckNode says besides its error.
type NodeReport struct {
	// Found are results that refuse nothing but are worth knowing, one
	// line each starting with the key ("http.address: port 8085 is
	// free now").
	Found []string
	// NotChecked are the checks that need what the node does not offer
	// here, one line each starting with the key ("kubeconfig: whether the
	// API server ... answers ...").
	NotChecked []string
}

// nodeCheck gathers CheckNode's results.
type nodeCheck struct {
	cfg        Config
	standalone bool // the mode, as Start chooses it
	report     NodeReport
	errs       []error
}

func (n *nodeCheck) fail(key string, err error) {
	n.errs = append(n.errs, &Error{Key: key, Reason: err.Error(), Err: err})
}

func (n *nodeCheck) skip(format string, args ...any) {
	n.report.NotChecked = append(n.report.NotChecked, fmt.Sprintf(format, args...))
}

func (n *nodeCheck) found(format string, args ...any) {
	n.report.Found = append(n.report.Found, fmt.Sprintf(format, args...))
}

// mode finds the mode as Start does: kubeconfig, in-cluster, or standalone.
func (n *nodeCheck) mode() {
	switch {
	case n.cfg.Kubeconfig != "":
		if rc, err := clientcmd.BuildConfigFromFlags("", n.cfg.Kubeconfig); err != nil {
			n.fail("kubeconfig", err)
		} else {
			n.skip("kubeconfig: whether the API server %s answers and accepts the credentials (needs the API server)", rc.Host)
		}
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		if rc, err := rest.InClusterConfig(); err != nil {
			n.fail("kubeconfig", fmt.Errorf("empty, and the in-cluster configuration cannot be used: %w", err))
		} else {
			n.skip("kubeconfig: empty, in-cluster: whether the API server %s answers and accepts the service account (needs the API server)", rc.Host)
		}
	default:
		n.standalone = true
	}
}

func (n *nodeCheck) directories() {
	cfg := n.cfg
	dirs := []struct{ key, path string }{
		{"stateDir", cfg.StateDir},
		{"kubelet.registryDir", cfg.Kubelet.RegistryDir},
		{"kubelet.pluginsDir", cfg.Kubelet.PluginsDir},
		{"cdi.dir", cfg.CDI.Dir},
	}
	if n.standalone {
		dirs = append(dirs, struct{ key, path string }{"slices.dryRunDir", cfg.Slices.DryRunDir})
	}
	for _, d := range dirs {
		checked, err := checkWritableDir(d.path)
		switch {
		case err != nil:
			n.fail(d.key, err)
		case !checked:
			n.skip("%s: whether %s is writable (not asked on %s)", d.key, d.path, runtime.GOOS)
		case d.key == "stateDir":
			// The claim record, if there is one already.
			record := cfg.ClaimRecordDir()
			if _, err := os.Lstat(record); err == nil {
				if _, err := checkWritableDir(record); err != nil {
					n.fail(d.key, fmt.Errorf("the claim record: %w", err))
				}
			}
		}
	}
	if !n.standalone {
		return
	}
	if fi, err := os.Stat(cfg.Claims.Dir); err == nil {
		if !fi.IsDir() {
			n.fail("claims.dir", fmt.Errorf("%s is not a directory", cfg.Claims.Dir))
		} else if _, err := canAccess(cfg.Claims.Dir, accessRead|accessSearch); err != nil {
			n.fail("claims.dir", fmt.Errorf("%s is not readable (%w)", cfg.Claims.Dir, err))
		}
	}
}

// kubeletCheckpoint reads the kubelet's checkpoint as the sweep and the
// reconciliation of a damaged record would.
func (n *nodeCheck) kubeletCheckpoint() {
	path, sweep := n.cfg.Kubelet.DRAManagerState, n.cfg.Cleanup.Interval > 0
	_, err := kubeletcompat.ReadDRAManagerState(path)
	switch {
	case err == nil:
	case !errors.Is(err, fs.ErrNotExist):
		n.fail("kubelet.draManagerState", fmt.Errorf("%w: the sweep for leftover claims would clean nothing", err))
	case n.standalone:
		if sweep {
			n.found("kubelet.draManagerState: %s does not exist, as expected standalone (no kubelet): the sweep for leftover claims cleans nothing", path)
		}
	case sweep:
		n.fail("kubelet.draManagerState", fmt.Errorf("%s does not exist, and a running kubelet always has one: the path is wrong "+
			"(the kubelet's --root-dir + /dra_manager_state); until it is right the sweep for leftover claims cleans nothing "+
			"(cleanup.interval: 0s turns the sweep off)", path))
	}
}

func (n *nodeCheck) httpAddress() {
	if n.cfg.HTTP.Address == "" {
		return
	}
	host, port, _ := net.SplitHostPort(n.cfg.HTTP.Address) // Validate checked it
	ip := net.ParseIP(host)
	switch {
	case ip != nil && !ip.IsUnspecified() && !ip.IsLoopback() && !isLocalAddress(ip):
		n.fail("http.address", fmt.Errorf("%s is not an address of this machine", host))
		return
	case ip == nil && host != "":
		n.skip("http.address: whether %q names an address of this machine, and whether port %s is free there (needs name resolution)", host, port)
		return
	case port == "0":
		return // any free port
	}
	// Listen as Start would, and let go at once.
	lis, err := net.Listen("tcp", n.cfg.HTTP.Address)
	switch {
	case err == nil:
		lis.Close()
		n.found("http.address: port %s is free now", port)
	case errors.Is(err, syscall.EADDRINUSE):
		n.found("http.address: port %s is in use now: the agent cannot start while it is (an agent running now would hold it)", port)
	default:
		n.fail("http.address", err)
	}
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

// CheckPluginBinaries is `config validate`'s check of the plugin binaries
// named in cfg, the one the agent's plugin manager makes before it runs a
// plugin (pluginmgr.VerifyBinary). A binary that exists but does not match
// its digest (or cannot be run) is an error naming the key: the agent
// would refuse it. A binary that does not exist is only a warning, because
// a configuration is often validated away from the node that has the
// binaries.
func CheckPluginBinaries(cfg Config) (warnings []string, err error) {
	var errs []error
	for i, d := range cfg.Plugins.Drivers {
		key := fmt.Sprintf("plugins.drivers[%d]", i)
		verr := pluginmgr.VerifyBinary(d.Path, d.SHA256)
		switch {
		case verr == nil:
		case errors.Is(verr, os.ErrNotExist):
			warnings = append(warnings, fmt.Sprintf("%s.path: plugin %q: %s does not exist here; its sha256 was not checked", key, d.Name, d.Path))
		case errors.Is(verr, pluginmgr.ErrChecksumMismatch):
			errs = append(errs, &Error{Key: key + ".sha256", Reason: fmt.Sprintf("plugin %q: %v", d.Name, verr)})
		default:
			errs = append(errs, &Error{Key: key + ".path", Reason: fmt.Sprintf("plugin %q: %v", d.Name, verr)})
		}
	}
	return warnings, errors.Join(errs...)
}
