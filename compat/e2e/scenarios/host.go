package scenarios

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"

	"github.com/dranode/dranode/compat/e2e/harness"
)

// Host is the kubelet side of a test node, the same whichever driver
// serves it: the kubelet's own plugin and DRA managers (stopped and
// started again with the pods that were active), the node's pods, and the
// checks on what the kubelet gets. The agent's and the piecemeal driver's
// test nodes embed it; it provides every Node method but the
// driver-specific ones. Its methods fail the test themselves.
type Host struct {
	t                               testing.TB
	ctx                             context.Context
	cluster                         *harness.Cluster
	node, namespace                 string
	registryDir, kubeletDir, cdiDir string

	kubelet *harness.Kubelet
	// healthServices are the versions of the device-health service the
	// kubelet knows (harness.KubeletOptions.HealthServices).
	healthServices []string
	// stoppedPods were active when the kubelet was stopped.
	stoppedPods []*corev1.Pod
}

var (
	nameCleaner = regexp.MustCompile(`[^a-z0-9]+`)
	nodeSeq     atomic.Int64
)

// NodeName is a Node (and namespace) name for t, from its name and unique
// in the test binary: the control plane outlives one run of a test or a
// benchmark (go test -count=N), and objects of an earlier run (slices,
// leases: no garbage collector runs) must not collide.
func NodeName(t testing.TB) string {
	name := strings.Trim(nameCleaner.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(name) > 50 {
		name = strings.Trim(name[:50], "-")
	}
	return fmt.Sprintf("%s-%d", name, nodeSeq.Add(1))
}

// NewHost is the kubelet side of node, with the pods in namespace, the
// driver's registration sockets in registryDir, the kubelet's DRA state in
// kubeletDir and the driver's CDI specs in cdiDir. The kubelet starts with
// StartKubelet.
func NewHost(t testing.TB, ctx context.Context, cluster *harness.Cluster, node, namespace, registryDir, kubeletDir, cdiDir string) *Host {
	return &Host{t: t, ctx: ctx, cluster: cluster, node: node, namespace: namespace,
		registryDir: registryDir, kubeletDir: kubeletDir, cdiDir: cdiDir}
}

func (h *Host) Context() context.Context  { return h.ctx }
func (h *Host) Cluster() *harness.Cluster { return h.cluster }
func (h *Host) Namespace() string         { return h.namespace }
func (h *Host) Kubelet() *harness.Kubelet { return h.kubelet }
func (h *Host) CDIDir() string            { return h.cdiDir }

// KubeletDir holds the kubelet's DRA state (its checkpoint).
func (h *Host) KubeletDir() string { return h.kubeletDir }

// StartKubelet starts the kubelet's managers without waiting for anything;
// the pods active when it was last stopped are active again.
func (h *Host) StartKubelet() {
	h.t.Helper()
	active := h.stoppedPods
	h.stoppedPods = nil
	k, err := harness.StartKubelet(h.ctx, harness.KubeletOptions{
		Client: h.cluster.Client, NodeName: h.node,
		RegistryDir: h.registryDir, StateDir: h.kubeletDir,
		ActivePods: active, Logger: kubeletLogger(), HealthServices: h.healthServices,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.kubelet = k
	h.t.Cleanup(func() {
		if h.kubelet == k {
			k.Stop()
			h.kubelet = nil
		}
	})
}

// KnowHealthServices makes the kubelets started from now on know only
// these versions of the device-health service, as an older kubelet does
// (harness.KubeletOptions.HealthServices).
func (h *Host) KnowHealthServices(services ...string) { h.healthServices = services }

// StopKubelet stops the kubelet; the next StartKubelet starts with the
// pods that were active.
func (h *Host) StopKubelet() {
	if h.kubelet != nil {
		h.kubelet.Stop()
		h.stoppedPods = h.kubelet.ActivePods()
		h.kubelet = nil
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

// WaitRegistered waits until the kubelet's plugin manager registered the
// plugin for driver (registration went through the kubelet's own code),
// failing at once if driverProc exits.
func (h *Host) WaitRegistered(driver string, driverProc *harness.Process) {
	h.t.Helper()
	h.waitRegistration(driver, nil, driverProc)
}

// Registration returns the kubelet plugin manager's registration of driver,
// nil when it holds none.
func (h *Host) Registration(driver string) *draplugin.DRAPlugin {
	p, _ := h.plugins().GetPlugin(driver)
	return p
}

// WaitReregistered waits until the kubelet's plugin manager holds a
// registration of driver other than old, failing at once if driverProc
// exits. A driver restarted on the same socket path is first reached
// through the killed instance's registration (its gRPC connection dials
// the new process); the kubelet drops that registration when it sees the
// socket replaced and knows no plugin of the driver until it registered
// the new one. WaitRegistered can return inside that window.
func (h *Host) WaitReregistered(driver string, old *draplugin.DRAPlugin, driverProc *harness.Process) {
	h.t.Helper()
	h.waitRegistration(driver, old, driverProc)
}

// waitRegistration polls the kubelet for a registration of driver that is
// not old (nil: any).
func (h *Host) waitRegistration(driver string, old *draplugin.DRAPlugin, driverProc *harness.Process) {
	h.t.Helper()
	h.poll(driverProc, "kubelet registration of "+driver, func(context.Context) (bool, error) {
		p, err := h.plugins().GetPlugin(driver)
		if err == nil && p == old {
			err = errors.New("the kubelet still holds the registration from before the restart")
		}
		return err == nil, err
	})
}

// plugins is the kubelet's DRA plugin manager.
func (h *Host) plugins() *draplugin.DRAPluginManager {
	return h.kubelet.DRA.GetWatcherHandler().(*draplugin.DRAPluginManager)
}

// WaitSlices waits until the node's slices hold devices[driver] devices of
// every driver, failing at once if driverProc exits.
func (h *Host) WaitSlices(driverProc *harness.Process, devices map[string]int) {
	h.t.Helper()
	h.poll(driverProc, "slices of "+h.node, func(ctx context.Context) (bool, error) {
		list, err := h.cluster.NodeSlices(ctx, h.node)
		if err != nil {
			return false, err
		}
		for driver, want := range devices {
			if got := harness.CountDevices(list, driver); got != want {
				return false, fmt.Errorf("driver %s: %d devices published, want %d", driver, got, want)
			}
		}
		return true, nil
	})
}

// poll is harness.Poll for a minute that ends early, with the reason, when
// proc exits.
func (h *Host) poll(proc *harness.Process, what string, cond func(context.Context) (bool, error)) {
	h.t.Helper()
	exited := proc.Exited()
	err := harness.Poll(h.ctx, 50*time.Millisecond, 60*time.Second, what, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("%w: %v; log:\n%s", harness.ErrProcessExited, proc.ExitError(), proc.LogTail(30))
		default:
		}
		return cond(ctx)
	})
	if err != nil {
		h.t.Fatal(err)
	}
}

// Schedule creates count pods with claims from template (names prefix-0,
// ...), waits until the scheduler bound them and allocated their claims,
// and makes them active for the kubelet.
func (h *Host) Schedule(prefix string, count int, template string) []*corev1.Pod {
	h.t.Helper()
	pods, err := h.cluster.SchedulePods(h.ctx, h.namespace, h.node, prefix, count, template)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, p := range pods {
		h.kubelet.SetActive(p, true)
	}
	return pods
}

// Prepare runs the kubelet's PrepareResources for pod, retrying as the
// kubelet's pod workers do for up to PrepareTimeout, and says how many
// attempts it took.
func (h *Host) Prepare(pod *corev1.Pod) (attempts int, err error) {
	return h.kubelet.Prepare(h.ctx, pod, PrepareTimeout)
}

// PrepareAll prepares pods concurrently, as the kubelet's pod workers do.
func (h *Host) PrepareAll(pods []*corev1.Pod) {
	h.t.Helper()
	if err := h.kubelet.PrepareAll(h.ctx, pods, PrepareTimeout); err != nil {
		h.t.Fatal(err)
	}
}

// UnprepareAll unprepares and deletes pods; with ids, the CDI IDs of
// pods[i] (ids[i]) must no longer resolve.
func (h *Host) UnprepareAll(pods []*corev1.Pod, ids [][]string) {
	h.t.Helper()
	for i, p := range pods {
		h.kubelet.SetActive(p, false)
		if err := h.kubelet.DRA.UnprepareResources(h.ctx, p); err != nil {
			h.t.Fatalf("unprepare %s: %v", p.Name, err)
		}
		if err := h.cluster.DeletePod(h.ctx, p); err != nil {
			h.t.Fatal(err)
		}
		if ids != nil {
			if _, err := harness.ResolveCDI(h.cdiDir, ids[i]); !errors.Is(err, harness.ErrUnresolved) {
				h.t.Errorf("pod %s: after unprepare its CDI IDs %v still resolve (err %v)", p.Name, ids[i], err)
			}
		}
	}
}
