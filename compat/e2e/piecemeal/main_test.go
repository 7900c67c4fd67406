package piecemeal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dranode/dranode/compat/e2e/harness"
	"github.com/dranode/dranode/compat/e2e/scenarios"
	"github.com/dranode/dranode/pluginmgr/plugintest"
)

// Shared by every test: one control plane (nodes and namespaces are per
// test) and one build of the driver.
var (
	cluster      *harness.Cluster
	clusterError error
	driverBin    string
	buildError   error
)

const driverName = "piecemeal.example.com"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	binDir, err := os.MkdirTemp("", "piecemeal-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(binDir)
	moduleDir, err := filepath.Abs("../../../examples/piecemeal-driver")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Setup failures fail every test with their reason, so `go test`
	// output names what was missing.
	driverBin = filepath.Join(binDir, "piecemeal-driver")
	_, buildError = plugintest.Build(context.Background(), moduleDir, "./cmd/piecemeal-driver", driverBin)
	cluster, clusterError = harness.StartCluster()
	if cluster != nil {
		defer cluster.Stop()
	}
	return m.Run()
}

// node is one test's node: a Node object, a namespace, the driver process
// and the kubelet sharing registration and plugin directories.
type node struct {
	*scenarios.Host // the kubelet side
	t               testing.TB
	ctx             context.Context
	name            string
	ns              string
	numDevices      int
	driver          *harness.Process
	// The node's directories, as a kubelet host would have them.
	registryDir, pluginsDir, cdiDir         string
	stateDir, devRoot, bootIDFile, template string
}

// The piecemeal driver's node runs the shared scenarios (package scenarios).
var _ scenarios.Node = (*node)(nil)

// newNode lays out a node with numDevices simulated GPUs and the driver's
// command line; start runs it.
func newNode(t testing.TB, numDevices int) *node {
	t.Helper()
	if clusterError != nil {
		t.Fatalf("e2e setup: %v", clusterError)
	}
	if buildError != nil {
		t.Fatalf("e2e setup: %v", buildError)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	name := scenarios.NodeName(t)
	// Short paths: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "pm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n := &node{
		t: t, ctx: ctx, name: name, ns: name, numDevices: numDevices,
		registryDir: filepath.Join(dir, "registry"), pluginsDir: filepath.Join(dir, "plugins"),
		cdiDir: filepath.Join(dir, "cdi"), stateDir: filepath.Join(dir, "state"),
		devRoot: filepath.Join(dir, "dev"), bootIDFile: filepath.Join(dir, "boot_id"),
	}
	n.Host = scenarios.NewHost(t, ctx, cluster, n.name, n.ns, n.registryDir, filepath.Join(dir, "kubelet"), n.cdiDir)
	for _, d := range []string{n.registryDir, n.pluginsDir, n.cdiDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	n.setBootID("boot-1")
	if err := cluster.EnsureNamespace(ctx, n.ns); err != nil {
		t.Fatal(err)
	}
	if err := cluster.StartNode(ctx, n.name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.DeleteNode(context.Background(), n.name) })
	if err := cluster.EnsureDeviceClass(ctx, driverName, driverName); err != nil {
		t.Fatal(err)
	}
	n.driver = &harness.Process{
		Path: driverBin, LogPath: filepath.Join(dir, "driver.log"),
		Args: []string{
			"--driver-name=" + driverName, "--node-name=" + n.name, "--num-devices=" + strconv.Itoa(numDevices),
			"--dev-root=" + n.devRoot, "--cdi-dir=" + n.cdiDir, "--state-dir=" + n.stateDir,
			"--boot-id-file=" + n.bootIDFile, "--registry-dir=" + n.registryDir, "--plugins-dir=" + n.pluginsDir,
			"--kubeconfig=" + cluster.Kubeconfig,
		},
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("driver log tail:\n%s", n.driver.LogTail(40))
		}
	})
	t.Cleanup(n.driver.Stop)
	return n
}

// setBootID writes the boot ID file the driver reads at start; another
// value is what the driver sees after a reboot.
func (n *node) setBootID(id string) {
	n.t.Helper()
	if err := os.WriteFile(n.bootIDFile, []byte(id+"\n"), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// start runs the driver, waits for its slices, then starts the kubelet and
// waits for registration and for the slices to be back after the
// kubelet's start-up wipe.
func (n *node) start() {
	n.t.Helper()
	n.startDriver()
	n.waitSlices()
	n.startKubelet()
	n.waitSlices()
}

func (n *node) startDriver() {
	n.t.Helper()
	if err := n.driver.Start(); err != nil {
		n.t.Fatal(err)
	}
}

// startKubelet starts the kubelet's plugin and DRA managers and waits until
// they registered the driver.
func (n *node) startKubelet() {
	n.t.Helper()
	n.StartKubelet()
	n.waitRegistered()
}

// waitRegistered waits until the kubelet registered the driver.
func (n *node) waitRegistered() {
	n.t.Helper()
	n.WaitRegistered(driverName, n.driver)
}

// waitSlices waits until the node's slices of the driver hold every
// device.
func (n *node) waitSlices() {
	n.t.Helper()
	n.WaitSlices(n.driver, map[string]int{driverName: n.numDevices})
}

// SchedulePods creates count pods with template claims (names prefix-0...)
// and waits until the scheduler bound them and allocated their claims.
func (n *node) SchedulePods(prefix string, count int) []*corev1.Pod {
	n.t.Helper()
	if n.template == "" {
		if err := cluster.CreateTemplate(n.ctx, n.ns, "gpu", harness.ClaimSpecForClasses(driverName)); err != nil {
			n.t.Fatal(err)
		}
		n.template = "gpu"
	}
	return n.Schedule(prefix, count, n.template)
}

// allocatedDevices lists the devices of the pod's claim allocation.
func (n *node) allocatedDevices(pod *corev1.Pod) []string {
	n.t.Helper()
	claim, err := cluster.Client.ResourceV1().ResourceClaims(n.ns).Get(n.ctx, pod.Name+"-"+harness.PodClaimName, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	if claim.Status.Allocation == nil {
		n.t.Fatalf("claim of %s not allocated", pod.Name)
	}
	var out []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != driverName {
			n.t.Fatalf("claim of %s has a device of driver %s", pod.Name, r.Driver)
		}
		out = append(out, r.Device)
	}
	return out
}

// VerifyCDI checks what the kubelet would hand the runtime for pod: one
// CDI ID, resolving in the reference CDI library, injecting the device
// node and the environment of the device the scheduler allocated. It
// returns the IDs.
func (n *node) VerifyCDI(pod *corev1.Pod) []string {
	n.t.Helper()
	ids, err := n.Kubelet().CDIDevices(pod)
	if err != nil {
		n.t.Fatal(err)
	}
	if len(ids) != 1 {
		n.t.Fatalf("pod %s: kubelet got CDI IDs %v, want one", pod.Name, ids)
	}
	spec, err := harness.ResolveCDI(n.cdiDir, ids)
	if err != nil {
		n.t.Fatalf("pod %s: %v", pod.Name, err)
	}
	for _, dev := range n.allocatedDevices(pod) {
		// The driver maps device gpu-N to /dev/gpuN, made from /dev/null
		// (character device 1:3), and a per-driver variable.
		idx := strings.TrimPrefix(dev, "gpu-")
		if !slices.ContainsFunc(spec.Linux.Devices, func(d oci.LinuxDevice) bool {
			return d.Path == "/dev/gpu"+idx && d.Type == "c" && d.Major == 1 && d.Minor == 3
		}) {
			n.t.Errorf("pod %s: allocated %s but the injected devices are %v", pod.Name, dev, spec.Linux.Devices)
		}
		if !slices.ContainsFunc(spec.Process.Env, func(e string) bool { return strings.HasPrefix(e, harness.SimulatedGPUEnv(driverName, dev)+"=") }) {
			n.t.Errorf("pod %s: allocated %s but the injected env is %v", pod.Name, dev, spec.Process.Env)
		}
	}
	return ids
}

// sliceSelector selects the node's slices.
func sliceSelector(nodeName string) metav1.ListOptions {
	return metav1.ListOptions{FieldSelector: resourcev1.ResourceSliceSelectorNodeName + "=" + nodeName}
}
