package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"

	"github.com/dranode/dranode/compat/e2e/harness"
	"github.com/dranode/dranode/compat/e2e/scenarios"
)

// Shared by every test: one control plane (nodes, namespaces and drivers'
// slices are per test) and one build of the binaries.
var (
	cluster      *harness.Cluster
	clusterError error
	bins         harness.Binaries
	buildError   error
)

const gpuDriver = "gpu.example.com"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	binDir, err := os.MkdirTemp("", "dranode-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(binDir)
	repoRoot, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// A setup failure fails every test with its reason (rather than
	// exiting here), so `go test` output names what was missing.
	bins, buildError = harness.BuildBinaries(repoRoot, binDir)
	cluster, clusterError = harness.StartCluster()
	if cluster != nil {
		defer cluster.Stop()
	}
	return m.Run()
}

// node is one test's node: a Node object, a namespace, an agent and a
// kubelet sharing registration and plugin directories.
type node struct {
	*scenarios.Host // the kubelet side
	t               testing.TB
	ctx             context.Context
	name            string
	ns              string
	dir             string
	agent           *harness.Agent
	drivers         []harness.GPUDriver
	template        string
}

// The agent's node runs the shared scenarios (package scenarios).
var _ scenarios.Node = (*node)(nil)

// newNode brings up a node with an agent running drivers (default: one
// gpu-plugin for gpu.example.com with 8 devices), waits for its slices,
// starts the kubelet and waits until it registered every driver and the
// slices it wiped at its start are back.
func newNode(t testing.TB, drivers ...harness.GPUDriver) *node {
	t.Helper()
	return newNodeWith(t, nil, drivers...)
}

// newNodeWith is newNode with a chance to change the agent's options.
func newNodeWith(t testing.TB, tweak func(*harness.AgentOptions), drivers ...harness.GPUDriver) *node {
	t.Helper()
	needCluster(t)
	if buildError != nil {
		t.Fatalf("e2e setup: %v", buildError)
	}
	if len(drivers) == 0 {
		drivers = []harness.GPUDriver{{DriverName: gpuDriver, NumDevices: 8}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	name := scenarios.NodeName(t)
	// Short paths: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n := &node{t: t, ctx: ctx, name: name, ns: name, dir: dir, drivers: drivers}
	if err := cluster.EnsureNamespace(ctx, n.ns); err != nil {
		t.Fatal(err)
	}
	if err := cluster.StartNode(ctx, n.name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.DeleteNode(context.Background(), n.name) })
	for _, d := range drivers {
		if err := cluster.EnsureDeviceClass(ctx, d.DriverName, d.DriverName); err != nil {
			t.Fatal(err)
		}
	}
	opts := harness.AgentOptions{
		Bins: bins, Dir: filepath.Join(dir, "agent"), NodeName: n.name, Kubeconfig: cluster.Kubeconfig,
		RegistryDir: filepath.Join(dir, "registry"), PluginsDir: filepath.Join(dir, "plugins"),
		Drivers: drivers,
	}
	if tweak != nil {
		tweak(&opts)
	}
	n.agent, err = harness.NewAgent(opts)
	if err != nil {
		t.Fatal(err)
	}
	n.Host = scenarios.NewHost(t, ctx, cluster, n.name, n.ns, opts.RegistryDir, filepath.Join(dir, "kubelet"), n.agent.CDIDir)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log tail:\n%s", n.agent.LogTail(40))
		}
	})
	t.Cleanup(n.agent.Stop)
	return n
}

// start starts the agent, waits for its slices, then starts the kubelet and
// waits for registration and for the slices to come back after the
// kubelet's start-up wipe.
func (n *node) start() {
	n.t.Helper()
	n.startAgent()
	n.waitSlices()
	n.startKubelet()
	n.waitSlices()
}

// startAgent starts the agent process; it is ready only once the kubelet
// registered its drivers, so callers wait for slices or registration.
func (n *node) startAgent() {
	n.t.Helper()
	if err := n.agent.Start(); err != nil {
		n.t.Fatal(err)
	}
}

// startKubelet starts the kubelet and waits until it registered every
// driver and the agent is ready.
func (n *node) startKubelet() {
	n.t.Helper()
	n.StartKubelet()
	for _, d := range n.drivers {
		n.WaitRegistered(d.DriverName, n.agent.Process)
	}
	if err := n.agent.WaitReady(n.ctx, 60*time.Second); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) waitSlices() {
	n.t.Helper()
	devices := map[string]int{}
	for _, d := range n.drivers {
		devices[d.DriverName] = d.NumDevices
	}
	n.WaitSlices(n.agent.Process, devices)
}

// ensureTemplate creates the namespace's claim template (one device from
// each driver's class) once.
func (n *node) ensureTemplate() string {
	n.t.Helper()
	if n.template != "" {
		return n.template
	}
	var classes []string
	for _, d := range n.drivers {
		classes = append(classes, d.DriverName)
	}
	if err := cluster.CreateTemplate(n.ctx, n.ns, "gpus", harness.ClaimSpecForClasses(classes...)); err != nil {
		n.t.Fatal(err)
	}
	n.template = "gpus"
	return n.template
}

// SchedulePods creates count pods with template claims (names prefix-0...)
// and waits until the scheduler bound them and allocated their claims.
func (n *node) SchedulePods(prefix string, count int) []*corev1.Pod {
	n.t.Helper()
	return n.Schedule(prefix, count, n.ensureTemplate())
}

// VerifyCDI checks what the kubelet would hand the runtime for pod: CDI
// IDs for every driver of the node, each resolving in the reference CDI
// library, and the device each ID injects is the device the scheduler
// allocated. It returns the IDs.
func (n *node) VerifyCDI(pod *corev1.Pod) []string {
	n.t.Helper()
	ids, err := n.Kubelet().CDIDevices(pod)
	if err != nil {
		n.t.Fatal(err)
	}
	if len(ids) != len(n.drivers) {
		n.t.Fatalf("pod %s: kubelet got CDI IDs %v, want one per driver (%d)", pod.Name, ids, len(n.drivers))
	}
	spec, err := harness.ResolveCDI(n.agent.CDIDir, ids)
	if err != nil {
		n.t.Fatalf("pod %s: %v", pod.Name, err)
	}
	claim, err := cluster.Client.ResourceV1().ResourceClaims(n.ns).Get(n.ctx, pod.Name+"-"+harness.PodClaimName, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	if claim.Status.Allocation == nil {
		n.t.Fatalf("claim of %s not allocated", pod.Name)
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		// gpu-plugin maps device gpu-N to a per-driver variable and a
		// device node made from /dev/null (character device 1:3), which the
		// runtime creates in the container and allows in its cgroup.
		if !slices.ContainsFunc(spec.Linux.Devices, func(d oci.LinuxDevice) bool {
			return d.Path == gpuContainerPath(r.Driver, r.Device) && d.Type == "c" && d.Major == 1 && d.Minor == 3
		}) {
			n.t.Errorf("pod %s: allocated %s/%s but the injected devices are %v", pod.Name, r.Driver, r.Device, spec.Linux.Devices)
		}
		if !slices.ContainsFunc(spec.Process.Env, func(e string) bool { return strings.HasPrefix(e, harness.SimulatedGPUEnv(r.Driver, r.Device)+"=") }) {
			n.t.Errorf("pod %s: allocated %s/%s but the injected env is %v", pod.Name, r.Driver, r.Device, spec.Process.Env)
		}
	}
	return ids
}

// gpuContainerPath is where gpu-plugin puts a device's node in the
// container: /dev/gpuN for its default driver name, /dev/<driver>/gpuN for
// any other, so that two instances never share a path.
func gpuContainerPath(driver, device string) string {
	node := strings.Replace(device, "gpu-", "gpu", 1)
	if driver == gpuDriver {
		return "/dev/" + node
	}
	return "/dev/" + driver + "/" + node
}

// watchSlices records every change to the node's slices from now on (not
// the existing ones: the watch starts at the list's resource version).
func watchSlices(ctx context.Context, t testing.TB, nodeName string) <-chan watch.Event {
	t.Helper()
	opts := metav1.ListOptions{FieldSelector: resourcev1.ResourceSliceSelectorNodeName + "=" + nodeName}
	list, err := cluster.Client.ResourceV1().ResourceSlices().List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.ResourceVersion = list.ResourceVersion
	w, err := cluster.Client.ResourceV1().ResourceSlices().Watch(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w.ResultChan()
}

// assertNotRegistered checks the kubelet has no plugin for driver.
func (n *node) assertNotRegistered(driver string) {
	n.t.Helper()
	plugins := n.Kubelet().DRA.GetWatcherHandler().(*draplugin.DRAPluginManager)
	if _, err := plugins.GetPlugin(driver); err == nil {
		n.t.Errorf("driver %s is registered with the kubelet", driver)
	}
}

// allocatedDevices lists (driver, device) of the pod's claim allocation.
func (n *node) allocatedDevices(pod *corev1.Pod) [][2]string {
	n.t.Helper()
	claim, err := cluster.Client.ResourceV1().ResourceClaims(n.ns).Get(n.ctx, pod.Name+"-"+harness.PodClaimName, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	if claim.Status.Allocation == nil {
		n.t.Fatalf("claim of %s not allocated", pod.Name)
	}
	var out [][2]string
	for _, r := range claim.Status.Allocation.Devices.Results {
		out = append(out, [2]string{r.Driver, r.Device})
	}
	return out
}

func needCluster(t testing.TB) {
	t.Helper()
	if clusterError != nil {
		t.Fatalf("e2e setup: %v", clusterError)
	}
}
