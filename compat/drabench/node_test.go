package drabench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/compat/e2e/harness"
)

// The drivers, each on a node of its own with a kubelet of its own.
const (
	kindNull     = "null"     // the floor (nulldriver_test.go)
	kindAgent    = "agent"    // dranode-agent with the example gpu plugin
	kindUpstream = "upstream" // examples/piecemeal-driver, on the upstream kubeletplugin helper
	kindExample  = "example"  // dra-example-driver's design, on the upstream helper (exampledriver_test.go)
)

var driverNames = map[string]string{
	kindNull:     "null.example.com",
	kindAgent:    "gpu.example.com",
	kindUpstream: "piecemeal.example.com",
	kindExample:  "example.example.com",
}

// kubeletUserAgent tells the kubelet's own requests apart in the audit log.
const kubeletUserAgent = "drabench-kubelet"

// numDevices is more than any measurement holds at once.
const numDevices = 64

// driverNode is one driver's node: its Node object, namespace, driver
// process and the kubelet's plugin and DRA managers (the upstream code).
type driverNode struct {
	t       testing.TB
	ctx     context.Context
	kind    string
	driver  string
	name    string // node and namespace
	proc    *harness.Process
	agent   *harness.Agent // kind agent
	kubelet *harness.Kubelet

	registryDir, pluginsDir, kubeletDir, cdiDir string

	mu  sync.Mutex
	seq int
}

var nodeSeq int

func newDriverNode(t testing.TB, kind string) *driverNode {
	t.Helper()
	setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	nodeSeq++
	n := &driverNode{t: t, ctx: ctx, kind: kind, driver: driverNames[kind], name: fmt.Sprintf("bench-%s-%d", kind, nodeSeq)}
	dir, err := os.MkdirTemp("", "db-") // unix socket paths: at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n.registryDir, n.pluginsDir = filepath.Join(dir, "reg"), filepath.Join(dir, "plug")
	n.kubeletDir, n.cdiDir = filepath.Join(dir, "kubelet"), filepath.Join(dir, "cdi")
	for _, d := range []string{n.registryDir, n.pluginsDir, n.cdiDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := cluster.EnsureNamespace(ctx, n.name); err != nil {
		t.Fatal(err)
	}
	if err := cluster.StartNode(ctx, n.name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.DeleteNode(context.Background(), n.name) })
	if err := cluster.EnsureDeviceClass(ctx, n.driver, n.driver); err != nil {
		t.Fatal(err)
	}
	if err := cluster.CreateTemplate(ctx, n.name, "gpu", harness.ClaimSpecForClasses(n.driver)); err != nil {
		t.Fatal(err)
	}

	// The kubelet first: its start wipes the node's slices, and a driver
	// started after it publishes once.
	sentinel := n.sentinelSlice()
	n.startKubelet()
	n.poll("the kubelet's start-up wipe of "+n.name+"'s slices", func(ctx context.Context) (bool, error) {
		_, err := cluster.Client.ResourceV1().ResourceSlices().Get(ctx, sentinel, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})

	logPath := filepath.Join(dir, "driver.log")
	switch kind {
	case kindNull:
		n.startSelf(logPath, nullDriverEnv+"="+n.driver, nullNodeEnv+"="+n.name, nullRegEnv+"="+n.registryDir, nullPlugEnv+"="+n.pluginsDir)
		n.publishSlice()
	case kindExample:
		n.startSelf(logPath, exampleDriverEnv+"="+n.driver, exampleNodeEnv+"="+n.name, exampleRegEnv+"="+n.registryDir,
			examplePlugEnv+"="+n.pluginsDir, exampleStateEnv+"="+filepath.Join(dir, "state"), exampleCDIEnv+"="+n.cdiDir,
			exampleKubeEnv+"="+cluster.Kubeconfig)
		n.publishSlice()
	case kindAgent:
		a, err := harness.NewAgent(harness.AgentOptions{
			Bins: bins, Dir: filepath.Join(dir, "agent"), NodeName: n.name, Kubeconfig: cluster.Kubeconfig,
			RegistryDir: n.registryDir, PluginsDir: n.pluginsDir,
			Drivers: []harness.GPUDriver{{DriverName: n.driver, NumDevices: numDevices}},
			Env:     agentEnv(),
		})
		if err != nil {
			t.Fatal(err)
		}
		n.agent, n.proc = a, a.Process
		n.cdiDir = a.CDIDir
		n.start()
		if err := a.WaitReady(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	case kindUpstream:
		n.proc = &harness.Process{
			Path: upstreamBin, LogPath: logPath,
			Args: []string{
				"--driver-name=" + n.driver, "--node-name=" + n.name, "--num-devices=" + strconv.Itoa(numDevices),
				"--dev-root=" + filepath.Join(dir, "dev"), "--cdi-dir=" + n.cdiDir, "--state-dir=" + filepath.Join(dir, "state"),
				"--boot-id-file=" + filepath.Join(dir, "boot_id"), "--registry-dir=" + n.registryDir, "--plugins-dir=" + n.pluginsDir,
				"--kubeconfig=" + cluster.Kubeconfig,
			},
		}
		if err := os.WriteFile(filepath.Join(dir, "boot_id"), []byte("boot-1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		n.start()
	}
	n.waitRegistered()
	n.waitSlices()
	return n
}

// startSelf starts this test binary as the node's driver, with env
// (KEY=value) telling it which.
func (n *driverNode) startSelf(logPath string, env ...string) {
	n.t.Helper()
	n.proc = &harness.Process{Path: os.Args[0], LogPath: logPath, Env: env}
	n.start()
}

// agentEnv is the agent's environment beyond the test's: with
// DRABENCH_PROFILE_DIR set, DRANODE_HTTP_PPROF (which also turns on its
// block profile), so that BenchmarkShares can fetch its profiles.
func agentEnv() []string {
	if os.Getenv("DRABENCH_PROFILE_DIR") == "" {
		return nil
	}
	return []string{"DRANODE_HTTP_PPROF=true"}
}

func (n *driverNode) start() {
	n.t.Helper()
	if err := n.proc.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() {
		if n.t.Failed() {
			n.t.Logf("%s driver log tail:\n%s", n.kind, n.proc.LogTail(40))
		}
	})
	n.t.Cleanup(n.proc.Stop)
}

// startKubelet runs the kubelet's DRA and plugin managers with a client
// of their own, whose user agent tells their requests apart.
func (n *driverNode) startKubelet() {
	n.t.Helper()
	cfg := rest.CopyConfig(cluster.Config)
	cfg.UserAgent = kubeletUserAgent
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	k, err := harness.StartKubelet(n.ctx, harness.KubeletOptions{
		Client: client, NodeName: n.name, RegistryDir: n.registryDir, StateDir: n.kubeletDir,
		Logger: discardLogger(),
	})
	if err != nil {
		n.t.Fatal(err)
	}
	n.kubelet = k
	n.t.Cleanup(k.Stop)
}

// sentinelSlice publishes a slice for the node before the kubelet starts;
// its disappearance is the kubelet's wipe.
func (n *driverNode) sentinelSlice() string {
	n.t.Helper()
	s := n.slice(n.name+"-sentinel", "sentinel.example.com", 1)
	if _, err := cluster.Client.ResourceV1().ResourceSlices().Create(n.ctx, s, metav1.CreateOptions{}); err != nil {
		n.t.Fatal(err)
	}
	return s.Name
}

// publishSlice publishes the devices of a driver that does not publish
// its own (the null and example drivers).
func (n *driverNode) publishSlice() {
	n.t.Helper()
	if _, err := cluster.Client.ResourceV1().ResourceSlices().Create(n.ctx, n.slice(n.name+"-"+n.kind, n.driver, numDevices), metav1.CreateOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

func (n *driverNode) slice(name, driver string, devices int) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To(n.name),
			Pool: resourcev1.ResourcePool{Name: n.name, ResourceSliceCount: 1},
		},
	}
	for i := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", i)})
	}
	return s
}

func (n *driverNode) waitRegistered() {
	n.t.Helper()
	plugins := n.kubelet.DRA.GetWatcherHandler().(*draplugin.DRAPluginManager)
	n.poll("kubelet registration of "+n.driver, func(context.Context) (bool, error) {
		_, err := plugins.GetPlugin(n.driver)
		return err == nil, err
	})
}

func (n *driverNode) waitSlices() {
	n.t.Helper()
	n.poll("slices of "+n.name, func(ctx context.Context) (bool, error) {
		list, err := cluster.NodeSlices(ctx, n.name)
		if err != nil {
			return false, err
		}
		if got := harness.CountDevices(list, n.driver); got != numDevices {
			return false, fmt.Errorf("%d devices published, want %d", got, numDevices)
		}
		return true, nil
	})
}

// poll waits for cond for up to a minute, failing at once if the driver
// process exits.
func (n *driverNode) poll(what string, cond func(context.Context) (bool, error)) {
	n.t.Helper()
	var exited <-chan struct{}
	if n.proc != nil {
		exited = n.proc.Exited()
	}
	err := harness.Poll(n.ctx, 20*time.Millisecond, time.Minute, what, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("%w: %v; log:\n%s", harness.ErrProcessExited, n.proc.ExitError(), n.proc.LogTail(30))
		default:
		}
		return cond(ctx)
	})
	if err != nil {
		n.t.Fatal(err)
	}
}

// schedule creates count pods with a claim each and waits until the
// scheduler bound them and allocated their claims; they are active for
// the kubelet.
func (n *driverNode) schedule(count int) []*corev1.Pod {
	n.t.Helper()
	n.mu.Lock()
	n.seq++
	prefix := fmt.Sprintf("p%d", n.seq)
	n.mu.Unlock()
	pods, err := cluster.SchedulePods(n.ctx, n.name, n.name, prefix, count, "gpu")
	if err != nil {
		n.t.Fatal(err)
	}
	for _, p := range pods {
		n.kubelet.SetActive(p, true)
	}
	return pods
}

// each calls fn for every pod with at most workers at once (the kubelet's
// pod workers) and returns each call's time and the time until the last
// ended.
func each(pods []*corev1.Pod, workers int, fn func(*corev1.Pod) error) ([]time.Duration, time.Duration, error) {
	lat := make([]time.Duration, len(pods))
	errs := make([]error, len(pods))
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for i, p := range pods {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t0 := time.Now()
			errs[i] = fn(p)
			lat[i] = time.Since(t0)
		})
	}
	wg.Wait()
	return lat, time.Since(start), errors.Join(errs...)
}

func (n *driverNode) prepare(p *corev1.Pod) error { return n.kubelet.DRA.PrepareResources(n.ctx, p) }

func (n *driverNode) unprepare(p *corev1.Pod) error {
	n.kubelet.SetActive(p, false)
	return n.kubelet.DRA.UnprepareResources(n.ctx, p)
}

// remove deletes the pods and does the resourceclaim controller's work
// (deallocate, delete), as after the kubelet unprepared them.
func (n *driverNode) remove(pods []*corev1.Pod) {
	n.t.Helper()
	for _, p := range pods {
		if err := cluster.DeletePod(n.ctx, p); err != nil {
			n.t.Fatal(err)
		}
	}
}
