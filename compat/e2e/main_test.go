package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"

	"github.com/dranode/dranode/compat/e2e/harness"
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
	t        testing.TB
	ctx      context.Context
	name     string
	ns       string
	dir      string
	agent    *harness.Agent
	kubelet  *harness.Kubelet
	kubeDir  string // the kubelet's DRA state
	drivers  []harness.GPUDriver
	template string
	// stoppedPods were active when the kubelet was stopped.
	stoppedPods []*corev1.Pod
}

var (
	nameCleaner = regexp.MustCompile(`[^a-z0-9]+`)
	nodeSeq     atomic.Int64
)

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
	name := strings.Trim(nameCleaner.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(name) > 50 {
		name = strings.Trim(name[:50], "-")
	}
	// A benchmark function runs several times; objects of an earlier run
	// (slices, leases: no garbage collector runs) must not collide.
	name = fmt.Sprintf("%s-%d", name, nodeSeq.Add(1))
	// Short paths: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n := &node{t: t, ctx: ctx, name: name, ns: name, dir: dir, kubeDir: filepath.Join(dir, "kubelet"), drivers: drivers}
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
	n.launchKubelet()
	for _, d := range n.drivers {
		n.waitRegistered(d.DriverName)
	}
	if err := n.agent.WaitReady(n.ctx, 60*time.Second); err != nil {
		n.t.Fatal(err)
	}
}

// launchKubelet starts the kubelet without waiting for anything.
func (n *node) launchKubelet() {
	n.t.Helper()
	active := n.stoppedPods
	n.stoppedPods = nil
	k, err := harness.StartKubelet(n.ctx, harness.KubeletOptions{
		Client: cluster.Client, NodeName: n.name,
		RegistryDir: n.agent.Opts.RegistryDir, StateDir: n.kubeDir,
		ActivePods: active, Logger: kubeletLogger(),
	})
	if err != nil {
		n.t.Fatal(err)
	}
	n.kubelet = k
	n.t.Cleanup(func() {
		if n.kubelet == k {
			k.Stop()
			n.kubelet = nil
		}
	})
}

// stopKubelet stops the kubelet; the next launchKubelet starts with the
// pods it had.
func (n *node) stopKubelet() {
	if n.kubelet != nil {
		n.kubelet.Stop()
		n.stoppedPods = n.kubelet.ActivePods()
		n.kubelet = nil
	}
}

// waitRegistered waits until the kubelet's DRA plugin manager has a usable
// plugin for driver: registration went through the kubelet's own code.
func (n *node) waitRegistered(driver string) {
	n.t.Helper()
	plugins := n.kubelet.DRA.GetWatcherHandler().(*draplugin.DRAPluginManager)
	err := harness.Poll(n.ctx, 50*time.Millisecond, 60*time.Second, "kubelet registration of "+driver, func(context.Context) (bool, error) {
		_, err := plugins.GetPlugin(driver)
		return err == nil, err
	})
	if err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) waitSlices() {
	n.t.Helper()
	exited := n.agent.Exited()
	err := harness.Poll(n.ctx, 50*time.Millisecond, 60*time.Second, "slices of "+n.name, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, harness.ErrAgentExited
		default:
		}
		list, err := cluster.NodeSlices(ctx, n.name)
		if err != nil {
			return false, err
		}
		for _, d := range n.drivers {
			if got := harness.CountDevices(list, d.DriverName); got != d.NumDevices {
				return false, fmt.Errorf("driver %s: %d devices published, want %d", d.DriverName, got, d.NumDevices)
			}
		}
		return true, nil
	})
	if err != nil {
		n.t.Fatal(err)
	}
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
	return n.schedulePodsWith(prefix, count, n.ensureTemplate())
}

// schedulePodsWith is SchedulePods with claims from another template.
func (n *node) schedulePodsWith(prefix string, count int, tmpl string) []*corev1.Pod {
	n.t.Helper()
	pods, err := cluster.SchedulePods(n.ctx, n.ns, n.name, prefix, count, tmpl)
	if err != nil {
		n.t.Fatal(err)
	}
	for _, p := range pods {
		n.kubelet.SetActive(p, true)
	}
	return pods
}

// prepare runs the kubelet's PrepareResources for pod, retrying like the
// kubelet's pod workers do until it succeeds or timeout passes.
func (n *node) prepare(pod *corev1.Pod, timeout time.Duration) error {
	_, err := n.kubelet.Prepare(n.ctx, pod, timeout)
	return err
}

// prepareAll prepares pods concurrently (as the kubelet's pod workers do)
// and fails the test on any error.
func (n *node) prepareAll(pods []*corev1.Pod, timeout time.Duration) {
	n.t.Helper()
	if err := n.kubelet.PrepareAll(n.ctx, pods, timeout); err != nil {
		n.t.Fatal(err)
	}
}

// VerifyCDI checks what the kubelet would hand the runtime for pod: CDI
// IDs for every driver of the node, each resolving in the reference CDI
// library, and the device each ID injects is the device the scheduler
// allocated. It returns the IDs.
func (n *node) VerifyCDI(pod *corev1.Pod) []string {
	n.t.Helper()
	ids, err := n.kubelet.CDIDevices(pod)
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
		// gpu-plugin maps device gpu-N to GPU_DEVICE_N and a device node.
		idx := strings.TrimPrefix(r.Device, "gpu-")
		if !slices.ContainsFunc(spec.Linux.Devices, func(d oci.LinuxDevice) bool { return d.Path == gpuContainerPath(r.Driver, r.Device) }) {
			n.t.Errorf("pod %s: allocated %s/%s but the injected devices are %v", pod.Name, r.Driver, r.Device, spec.Linux.Devices)
		}
		if !slices.ContainsFunc(spec.Process.Env, func(e string) bool { return strings.HasPrefix(e, "GPU_DEVICE_"+idx+"=") }) {
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

// UnprepareAll runs the kubelet's UnprepareResources for pods, deletes
// them, and checks their CDI IDs no longer resolve.
func (n *node) UnprepareAll(pods []*corev1.Pod, ids [][]string) {
	n.t.Helper()
	for i, p := range pods {
		n.kubelet.SetActive(p, false)
		if err := n.kubelet.DRA.UnprepareResources(n.ctx, p); err != nil {
			n.t.Fatalf("unprepare %s: %v", p.Name, err)
		}
		if err := cluster.DeletePod(n.ctx, p); err != nil {
			n.t.Fatal(err)
		}
		if ids != nil {
			if _, err := harness.ResolveCDI(n.agent.CDIDir, ids[i]); !errors.Is(err, harness.ErrUnresolved) {
				n.t.Errorf("pod %s: after unprepare its CDI IDs %v still resolve (err %v)", p.Name, ids[i], err)
			}
		}
	}
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
	plugins := n.kubelet.DRA.GetWatcherHandler().(*draplugin.DRAPluginManager)
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

// kubeletLogger keeps the kubelet code's logs out of benchmark output
// (klog writes them unprefixed, breaking benchstat's parsing) unless -v.
func kubeletLogger() logr.Logger {
	if testing.Verbose() {
		return klog.Background()
	}
	return logr.Discard()
}
