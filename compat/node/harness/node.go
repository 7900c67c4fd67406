package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dranode/dranode/tools/envtest/hostlock"
)

// Options says what node to start.
type Options struct {
	// Name is the Node's name; default "dranode-node".
	Name string
	// Kubeconfig is an admin kubeconfig for the API server (envtest's
	// KubeconfigPath). Required.
	Kubeconfig string
	// Binaries holds the node's programs; default: DRANODE_NODE_BIN, else
	// scripts/build-node.sh --print-dir of the repository (see FindBinaries).
	Binaries *Binaries
	// Images are OCI archives (tar) imported into containerd's k8s.io
	// namespace before the kubelet starts. One must be the sandbox image.
	Images []string
	// SandboxImage is the pause image's name as imported.
	SandboxImage string
	// Subnet is the bridge's private /24, as "a.b.c"; default "10.250.77".
	// The node's InternalIP is a.b.c.1.
	Subnet string
	// Log receives the harness's progress lines; nil discards them.
	Log io.Writer
	// ReadyTimeout bounds each wait for a component; default 2 minutes.
	ReadyTimeout time.Duration
	// KubeletFeatureGates are the kubelet's featureGates (e.g.
	// ResourceHealthStatus: true on a kubelet whose minor has it off by
	// default); nil keeps the kubelet's defaults.
	KubeletFeatureGates map[string]bool
}

const defaultSubnet = "10.250.77"

// A node's directory is nodeDirRoot/nodeDirPrefix<random>: in /tmp
// whatever TMPDIR is, because the kubelet's socket paths under it must fit
// a unix socket's 107 bytes, instance IDs (pod UIDs) included (106 with a
// loop.example.com registration socket), and because a node is host-wide
// state, not a test's scratch file: the next Start sweeps a dead node's
// directory there whatever TMPDIR the dead one had (make check gives its
// steps a private TMPDIR of their own).
const (
	nodeDirRoot   = "/tmp"
	nodeDirPrefix = "drn"
)

// Node is a running kubelet and containerd. Its methods are safe for
// concurrent use.
type Node struct {
	opts   Options
	dir    string
	bins   *Binaries
	client kubernetes.Interface
	nodeIP string
	undo   []cleanupStep // run in reverse by Stop

	mu         sync.Mutex
	containerd *process
	kubelet    *process
	stopped    bool
}

// cleanupStep is one thing Start did that Stop must undo.
type cleanupStep struct {
	what string
	fn   func() error
}

// Start brings a node up and waits until its Node is Ready. A partial start
// is rolled back: every step already taken is undone before Start returns
// its error.
func Start(ctx context.Context, opts Options) (n *Node, err error) {
	if opts.Kubeconfig == "" {
		return nil, errors.New("harness: Options.Kubeconfig is required")
	}
	if opts.SandboxImage == "" {
		return nil, errors.New("harness: Options.SandboxImage is required (the pause image's name)")
	}
	if opts.Name == "" {
		opts.Name = "dranode-node"
	}
	if opts.Subnet == "" {
		opts.Subnet = defaultSubnet
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 2 * time.Minute
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("harness: a real node needs root (containerd, runc, cgroups, mounts)")
	}
	bins := opts.Binaries
	if bins == nil {
		if bins, err = FindBinaries(); err != nil {
			return nil, err
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("harness: kubeconfig %s: %w", opts.Kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	n = &Node{opts: opts, bins: bins, client: client, nodeIP: opts.Subnet + ".1"}
	release, err := hostlock.Hold(ctx, n.logf)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	n.undo = append(n.undo, cleanupStep{"host lock", func() error { release(); return nil }})
	if err := SweepStale(n.opts.Log); err != nil {
		release()
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Stop())
			n = nil
		}
	}()
	if n.dir, err = os.MkdirTemp(nodeDirRoot, nodeDirPrefix); err != nil {
		return n, err
	}
	// Last to undo: everything else lives in it.
	n.undo = append(n.undo, cleanupStep{"node directory", func() error { return os.RemoveAll(n.dir) }})
	for _, d := range []string{"cdi", "cni", "kubelet", "pods", "logs", "volume-plugins", "path", "runc", "containerd/root", "containerd/state", "containerd/opt"} {
		if err = os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return n, err
		}
	}
	n.logf("node directory %s", n.dir)
	if err = n.hostPaths(); err != nil {
		return n, err
	}
	if err = n.makeCgroup(); err != nil {
		return n, err
	}
	if err = n.makeBridge(); err != nil {
		return n, err
	}
	n.undo = append(n.undo, cleanupStep{"mounts under the node directory", n.unmountAll})
	if err = n.startContainerd(ctx); err != nil {
		return n, err
	}
	n.undo = append(n.undo, cleanupStep{"containerd, its shims and containers", n.stopContainerd})
	for _, img := range opts.Images {
		if err = n.importImage(ctx, img); err != nil {
			return n, err
		}
	}
	if err = n.writeKubeletConfig(); err != nil {
		return n, err
	}
	n.undo = append(n.undo, cleanupStep{"kubelet", n.stopKubelet})
	if err = n.StartKubelet(ctx); err != nil {
		return n, err
	}
	return n, nil
}

// Name is the Node's name.
func (n *Node) Name() string { return n.opts.Name }

// Dir is the node's temporary directory.
func (n *Node) Dir() string { return n.dir }

// KubeletRootDir is the kubelet's --root-dir.
func (n *Node) KubeletRootDir() string { return filepath.Join(n.dir, "kubelet") }

// CDIDir is the directory containerd loads CDI specs from.
func (n *Node) CDIDir() string { return filepath.Join(n.dir, "cdi") }

// PodLogsDir is the kubelet's podLogsDir.
func (n *Node) PodLogsDir() string { return filepath.Join(n.dir, "logs") }

// InternalIP is the node's address, the gateway of its private bridge.
func (n *Node) InternalIP() string { return n.nodeIP }

// StartKubelet starts the kubelet (again, after StopKubelet) and waits until
// the Node is Ready.
func (n *Node) StartKubelet(ctx context.Context) error {
	n.mu.Lock()
	if n.kubelet != nil {
		n.mu.Unlock()
		return errors.New("harness: the kubelet is already running")
	}
	args := []string{
		"--config=" + filepath.Join(n.dir, "kubelet.yaml"),
		"--kubeconfig=" + n.opts.Kubeconfig,
		"--root-dir=" + n.KubeletRootDir(),
		"--cert-dir=" + filepath.Join(n.dir, "pki"),
		"--hostname-override=" + n.opts.Name,
		"--node-ip=" + n.nodeIP,
		"--v=2",
	}
	p, err := startProcess("kubelet", n.bins.Kubelet, args, n.dir, []string{"PATH=" + filepath.Join(n.dir, "path")})
	if err != nil {
		n.mu.Unlock()
		return err
	}
	n.kubelet = p
	n.mu.Unlock()
	n.logf("kubelet started (pid %d)", p.PID())
	return n.waitNodeReady(ctx, p)
}

// StopKubelet stops the kubelet as a service manager would (SIGTERM, then
// SIGKILL after 30 s); containers keep running.
func (n *Node) StopKubelet() error { return n.stopKubelet() }

func (n *Node) stopKubelet() error {
	n.mu.Lock()
	p := n.kubelet
	n.kubelet = nil
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Stop(30 * time.Second)
}

// KubeletPID is the running kubelet's process ID, 0 when it is stopped.
func (n *Node) KubeletPID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.kubelet == nil {
		return 0
	}
	return n.kubelet.PID()
}

// Stop stops the kubelet, every container, containerd and its shims, and
// removes everything Start made on the host. It is idempotent and reports
// every step that failed.
func (n *Node) Stop() error {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return nil
	}
	n.stopped = true
	n.mu.Unlock()
	var errs []error
	for i := len(n.undo) - 1; i >= 0; i-- {
		if err := n.undo[i].fn(); err != nil {
			errs = append(errs, fmt.Errorf("harness: undoing %s: %w", n.undo[i].what, err))
		}
	}
	return errors.Join(errs...)
}

// LogTail is the last lines of a component's log ("kubelet", "containerd").
func (n *Node) LogTail(component string, lines int) string {
	return tailFile(filepath.Join(n.dir, component+".log"), lines)
}

func (n *Node) logf(format string, args ...any) {
	fmt.Fprintf(n.opts.Log, "node: "+format+"\n", args...)
}

// waitNodeReady waits for the Node to be Ready and drops the not-ready taint
// that admission put on it when it registered: removing it is the node
// lifecycle controller's work, which the test control plane does not run
// (so that a kubelet restart does not evict pods).
func (n *Node) waitNodeReady(ctx context.Context, kubelet *process) error {
	ctx, cancel := context.WithTimeout(ctx, n.opts.ReadyTimeout)
	defer cancel()
	var last string
	for {
		select {
		case <-kubelet.Done():
			return fmt.Errorf("harness: the kubelet exited before its node was Ready (%v); log tail:\n%s", kubelet.Err(), n.LogTail("kubelet", 30))
		case <-ctx.Done():
			return fmt.Errorf("harness: node %s not Ready within %s (last: %s); kubelet log tail:\n%s", n.opts.Name, n.opts.ReadyTimeout, last, n.LogTail("kubelet", 30))
		case <-time.After(250 * time.Millisecond):
		}
		node, err := n.client.CoreV1().Nodes().Get(ctx, n.opts.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			continue
		}
		ready := false
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = c.Status == corev1.ConditionTrue
				last = fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
			}
		}
		if !ready {
			continue
		}
		if err := n.dropNotReadyTaint(ctx, node); err != nil {
			last = err.Error()
			continue
		}
		n.logf("node %s Ready", n.opts.Name)
		return nil
	}
}

func (n *Node) dropNotReadyTaint(ctx context.Context, node *corev1.Node) error {
	for i, t := range node.Spec.Taints {
		if t.Key != corev1.TaintNodeNotReady {
			continue
		}
		patch := fmt.Sprintf(`[{"op":"test","path":"/spec/taints/%d/key","value":%q},{"op":"remove","path":"/spec/taints/%d"}]`, i, t.Key, i)
		_, err := n.client.CoreV1().Nodes().Patch(ctx, node.Name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	return nil
}

// kubeletPath is a PATH for the kubelet: every command of the usual
// directories but iptables and ip6tables (see the package comment).
func (n *Node) kubeletPath() error {
	dst := filepath.Join(n.dir, "path")
	for _, d := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			name := e.Name()
			if strings.HasPrefix(name, "iptables") || strings.HasPrefix(name, "ip6tables") {
				continue
			}
			link := filepath.Join(dst, name)
			if _, err := os.Lstat(link); err == nil {
				continue // an earlier directory wins, as in PATH
			}
			if err := os.Symlink(filepath.Join(d, name), link); err != nil {
				return err
			}
		}
	}
	return nil
}

func tailFile(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	defer f.Close()
	var ring []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		ring = append(ring, s.Text())
		if len(ring) > lines {
			ring = ring[1:]
		}
	}
	return strings.Join(ring, "\n")
}

// run runs a short command and returns its combined output in the error.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// APIServerFlags are what the API server needs for a harness node: reach
// its kubelet (logs, exec) at its InternalIP, as the node's hostname
// resolves nowhere; and admit privileged containers, as clusters that run
// node agents do (kube-apiserver's default refuses them).
func APIServerFlags() []string {
	return []string{"--kubelet-preferred-address-types=InternalIP", "--allow-privileged=true",
		// Pods on the node's bridge reach the apiserver at the node's
		// address, as pods reach a control-plane node's.
		"--bind-address=0.0.0.0"}
}

// APIServerIPs are the addresses the apiserver's serving certificate must
// name for pods on a node with Options.Subnet subnet ("" for the default).
func APIServerIPs(subnet string) []net.IP {
	if subnet == "" {
		subnet = defaultSubnet
	}
	return []net.IP{net.ParseIP(subnet + ".1")}
}
