package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/dranode/dranode/pluginmgr/plugintest"
)

// Driver names of the two fleets.
const (
	AgentDriver    = "gpu.example.com"       // dranode-agent with examples/gpu
	UpstreamDriver = "piecemeal.example.com" // examples/piecemeal-driver on kubeletplugin
)

// Binaries are the drivers the fleet runs, built from this repository.
type Binaries struct {
	Agent, GPUPlugin, Piecemeal string
}

// Build builds dranode-agent, the example gpu plugin and the piecemeal
// driver from the repository at root into dir, each module alone
// (GOWORK=off), as a user building it would.
func Build(root, dir string) (Binaries, error) {
	b := Binaries{
		Agent:     filepath.Join(dir, "dranode-agent"),
		GPUPlugin: filepath.Join(dir, "gpu-plugin"),
		Piecemeal: filepath.Join(dir, "piecemeal-driver"),
	}
	for _, job := range []struct{ module, pkg, out string }{
		{"agent", "./cmd/dranode-agent", b.Agent},
		{"examples", "./gpu", b.GPUPlugin},
		{"examples/piecemeal-driver", "./cmd/piecemeal-driver", b.Piecemeal},
	} {
		if _, err := plugintest.Build(context.Background(), filepath.Join(root, job.module), job.pkg, job.out); err != nil {
			return Binaries{}, err
		}
	}
	return b, nil
}

// Kind says which driver a node runs.
type Kind string

// The two kinds of node.
const (
	KindAgent    Kind = "agent"
	KindUpstream Kind = "upstream"
)

// Node is one simulated node: a Node object, the kubelet's directories, a
// kubeconfig acting as the node's own user, the driver's processes (one
// per instance started, the newest last) and the kubelet stand-in.
type Node struct {
	Name       string
	Kind       Kind
	Devices    int
	Dir        string
	Kubeconfig string
	Kubelet    *Kubelet
	Bins       Binaries

	registryDir, pluginsDir, stateDir, cdiDir, devRoot, bootIDFile string

	Instances []*Process
	httpAddrs []string // agent: /readyz address of each instance
}

// NewNode lays out node name's directories under dir (short: socket paths
// are limited to 107 bytes) and writes its kubeconfig from admin, acting
// as NodeUser(name).
func NewNode(name string, kind Kind, devices int, dir string, bins Binaries, admin *rest.Config) (*Node, error) {
	n := &Node{
		Name: name, Kind: kind, Devices: devices, Dir: dir, Bins: bins,
		registryDir: filepath.Join(dir, "reg"), pluginsDir: filepath.Join(dir, "p"),
		stateDir: filepath.Join(dir, "state"), cdiDir: filepath.Join(dir, "cdi"),
		devRoot: filepath.Join(dir, "dev"), bootIDFile: filepath.Join(dir, "boot_id"),
		Kubeconfig: filepath.Join(dir, "kubeconfig"),
	}
	n.Kubelet = &Kubelet{RegistryDir: n.registryDir}
	for _, d := range []string{n.registryDir, n.pluginsDir, n.stateDir, n.cdiDir, n.devRoot} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("node %s: %w", name, err)
		}
	}
	if err := os.WriteFile(n.bootIDFile, []byte("boot-1\n"), 0o644); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	if err := writeKubeconfig(n.Kubeconfig, admin, NodeUser(name)); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	return n, nil
}

// writeKubeconfig writes a kubeconfig with admin's server and credentials
// that impersonates user (in system:masters, so that RBAC is not what is
// measured): the audit log then names the node of every request in
// impersonatedUser, whichever client library made it.
func writeKubeconfig(path string, admin *rest.Config, user string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["fleet"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: admin.TLSClientConfig.CAData}
	cfg.AuthInfos["node"] = &clientcmdapi.AuthInfo{Token: admin.BearerToken, Impersonate: user, ImpersonateGroups: []string{"system:masters"}}
	cfg.Contexts["fleet"] = &clientcmdapi.Context{Cluster: "fleet", AuthInfo: "node"}
	cfg.CurrentContext = "fleet"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	return nil
}

// Driver is the node's driver name.
func (n *Node) Driver() string {
	if n.Kind == KindAgent {
		return AgentDriver
	}
	return UpstreamDriver
}

// StartInstance starts one more instance of the node's driver: for the
// agent a new process with an instance ID of its own on the same state
// (kubelet.instanceID, as a DaemonSet with maxSurge starts the new pod next
// to the old one), for the upstream driver, which has no hand-over, a new
// process once the old one has stopped.
func (n *Node) StartInstance() (*Process, error) {
	i := len(n.Instances) + 1
	var p *Process
	switch n.Kind {
	case KindAgent:
		cfgPath := filepath.Join(n.Dir, fmt.Sprintf("agent-%d.yaml", i))
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		if err := n.writeAgentConfig(cfgPath, fmt.Sprintf("i%d", i), addr); err != nil {
			return nil, err
		}
		n.httpAddrs = append(n.httpAddrs, addr)
		p = &Process{Path: n.Bins.Agent, Args: []string{"--config", cfgPath}, LogPath: filepath.Join(n.Dir, fmt.Sprintf("agent-%d.log", i))}
	case KindUpstream:
		p = &Process{
			Path: n.Bins.Piecemeal, LogPath: filepath.Join(n.Dir, fmt.Sprintf("driver-%d.log", i)),
			Args: []string{
				"--driver-name=" + UpstreamDriver, "--node-name=" + n.Name, "--num-devices=" + strconv.Itoa(n.Devices),
				"--dev-root=" + n.devRoot, "--cdi-dir=" + n.cdiDir, "--state-dir=" + n.stateDir,
				"--boot-id-file=" + n.bootIDFile, "--registry-dir=" + n.registryDir, "--plugins-dir=" + n.pluginsDir,
				"--kubeconfig=" + n.Kubeconfig,
			},
		}
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	n.Instances = append(n.Instances, p)
	return p, nil
}

// Current is the newest instance.
func (n *Node) Current() *Process { return n.Instances[len(n.Instances)-1] }

// Stop stops every instance.
func (n *Node) Stop() {
	for _, p := range n.Instances {
		p.Stop()
	}
	n.Kubelet.Close()
}

func (n *Node) writeAgentConfig(path, instanceID, httpAddr string) error {
	data, err := os.ReadFile(n.Bins.GPUPlugin)
	if err != nil {
		return fmt.Errorf("plugin checksum: %w", err)
	}
	sum := sha256.Sum256(data)
	cfg := map[string]any{
		"nodeName":   n.Name,
		"kubeconfig": n.Kubeconfig,
		"stateDir":   n.stateDir,
		"bootIDFile": n.bootIDFile,
		"kubelet":    map[string]any{"registryDir": n.registryDir, "pluginsDir": n.pluginsDir, "instanceID": instanceID},
		"cdi":        map[string]any{"dir": n.cdiDir},
		"plugins": map[string]any{"drivers": []map[string]any{{
			"name": "gpu", "path": n.Bins.GPUPlugin, "sha256": hex.EncodeToString(sum[:]), "args": []string{},
			"config": map[string]any{"driverName": AgentDriver, "numDevices": n.Devices, "devRoot": n.devRoot},
		}}},
		"http": map[string]any{"address": httpAddr},
	}
	// JSON is YAML: no YAML encoder needed.
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// WaitReady waits until the newest instance is ready: for the agent its
// /readyz answers 200 (it holds the record and is registered), for the
// upstream driver it has been registered (the helper serves once it
// registers). It fails at once when the process exits.
func (n *Node) WaitReady(ctx context.Context) error {
	p := n.Current()
	if n.Kind == KindUpstream {
		return nil // RegisterNext was the event
	}
	addr := n.httpAddrs[len(n.httpAddrs)-1]
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("node %s: agent %w; log:\n%s", n.Name, ErrExited, p.LogTail(30))
		case <-ctx.Done():
			return fmt.Errorf("node %s: agent not ready (last /readyz: %s): %w", n.Name, last, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// NodeLabel is the label pods select their node by.
const NodeLabel = "kubernetes.io/hostname"

// CreateNode creates a Node object the scheduler places pods on: the
// not-ready taint that admission adds is removed (no node lifecycle
// controller runs to do it) and the status says Ready with room for pods.
// No heartbeat follows: nothing that would act on a stale one runs.
func CreateNode(ctx context.Context, client kubernetes.Interface, name string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{NodeLabel: name}}}
	created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	if len(created.Spec.Taints) > 0 {
		created.Spec.Taints = nil
		if created, err = client.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("untaint node %s: %w", name, err)
		}
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	now := metav1.Now()
	created.Status.Capacity, created.Status.Allocatable = capacity, capacity
	created.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "fleet stand-in", LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of node %s: %w", name, err)
	}
	return nil
}

// Register waits until the kubelet stand-in has registered the newest
// instance, and fails at once, with the end of its log, if that instance
// exits first.
func (n *Node) Register(ctx context.Context) (*Plugin, error) {
	p := n.Current()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-p.Exited():
			cancel(fmt.Errorf("node %s: driver %w before it registered; log:\n%s", n.Name, ErrExited, p.LogTail(20)))
		case <-ctx.Done():
		}
	}()
	plugin, err := n.Kubelet.RegisterNext(ctx)
	if err != nil && context.Cause(ctx) != nil && context.Cause(ctx) != ctx.Err() {
		return nil, context.Cause(ctx)
	}
	return plugin, err
}
