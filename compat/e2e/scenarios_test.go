package e2e

import (
	"errors"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"

	"github.com/dranode/dranode/compat/e2e/harness"
	"github.com/dranode/dranode/compat/e2e/scenarios"
)

// 50 pods prepared at once (scenarios.FiftyPods).
func TestFiftyPodsPreparedAndUnprepared(t *testing.T) {
	n := newNode(t, harness.GPUDriver{DriverName: gpuDriver, NumDevices: 64})
	n.start()
	scenarios.FiftyPods(t, n)
}

// The kubelet starts after the agent published its slices and deletes all
// of the node's slices; the agent puts them back by itself, without waiting
// for a periodic resync (upstream's publisher waits 30 s).
func TestSlicesReturnAfterKubeletStartWipe(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	n.waitSlices()
	events := watchSlices(n.ctx, t, n.name)
	n.startKubelet()
	var deletedAt time.Time
	deadline := time.After(60 * time.Second)
	for deletedAt.IsZero() {
		select {
		case ev := <-events:
			if ev.Type == watch.Deleted {
				deletedAt = time.Now()
			}
		case <-deadline:
			t.Fatal("the kubelet's start-up wipe deleted no slice of the node in 60s")
		}
	}
	n.waitSlices()
	t.Logf("slices back %v after the kubelet deleted them", time.Since(deletedAt).Round(time.Millisecond))
}

// The agent is killed while pods are being prepared and started again on
// the same state directory. The kubelet's plugin manager registers it
// again, the kubelet's retries succeed, and claims prepared before the
// crash are still known to the agent (their CDI specs still resolve, and
// unprepare works).
func TestAgentRestartMidway(t *testing.T) {
	n := newNode(t, harness.GPUDriver{DriverName: gpuDriver, NumDevices: 32})
	n.start()
	pods := n.SchedulePods("r", 20)
	n.PrepareAll(pods[:10])
	before := make([][]string, 10)
	for i, p := range pods[:10] {
		before[i] = n.VerifyCDI(p)
	}

	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i, p := range pods[10:] {
		wg.Go(func() { _, errs[i] = n.Prepare(p) })
	}
	n.agent.Kill()
	if err := n.agent.Start(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	n.WaitRegistered(gpuDriver, n.agent.Process)
	// The kubelet may still have held the killed instance's registration
	// when it first answered: it then drops it (its socket was removed)
	// and knows no plugin of the driver until it registered the new
	// instance's. /readyz answers 200 once the kubelet told this instance
	// that its registration went through.
	if err := n.agent.WaitReady(n.ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	ids := make([][]string, len(pods))
	for i, p := range pods {
		ids[i] = n.VerifyCDI(p)
		if i < 10 && strings.Join(ids[i], ",") != strings.Join(before[i], ",") {
			t.Errorf("pod %s: CDI IDs changed across the restart: %v, then %v", p.Name, before[i], ids[i])
		}
	}
	n.UnprepareAll(pods, ids)
}

// The driver plugin is killed with SIGKILL while the kubelet prepares
// pods; the agent restarts it and the kubelet's retries succeed. The plugin
// is frozen (SIGSTOP) before the prepares start, so calls are inside it
// when it dies; the agent's error counter proves some were.
func TestPluginKilledDuringPrepare(t *testing.T) {
	n := newNode(t, harness.GPUDriver{DriverName: gpuDriver, NumDevices: 32})
	n.start()
	oldPIDs, err := n.agent.PluginPIDs()
	if err != nil || len(oldPIDs) != 1 {
		t.Fatalf("plugin processes of the agent: %v, %v; want one", oldPIDs, err)
	}
	pods := n.SchedulePods("k", 20)
	errorsBefore := n.prepareErrors()

	if err := syscall.Kill(oldPIDs[0], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(pods))
	for i, p := range pods {
		wg.Go(func() { _, errs[i] = n.Prepare(p) })
	}
	// The frozen plugin has unread input once a Prepare reached it; the
	// error count below confirms the kill landed during calls.
	if err := harness.WaitForQueuedInput(n.ctx, oldPIDs[0], 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(oldPIDs[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := n.prepareErrors() - errorsBefore; got == 0 {
		t.Errorf("no prepare failed: the kill did not land during a Prepare call")
	} else {
		t.Logf("%v prepares failed with the plugin and were retried", got)
	}
	newPIDs, err := n.agent.PluginPIDs()
	if err != nil || len(newPIDs) != 1 || newPIDs[0] == oldPIDs[0] {
		t.Fatalf("plugin processes after the kill: %v (%v); want one new process, not %d", newPIDs, err, oldPIDs[0])
	}
	ids := make([][]string, len(pods))
	for i, p := range pods {
		ids[i] = n.VerifyCDI(p)
	}
	n.UnprepareAll(pods, ids)
}

// prepareErrors is the agent's dranode_prepare_errors_total, all drivers.
func (n *node) prepareErrors() float64 { return n.gauge("dranode_prepare_errors_total") }

// gauge sums a counter or gauge of the agent over its labels.
func (n *node) gauge(name string) float64 {
	n.t.Helper()
	families, err := n.agent.Metrics(n.ctx)
	if err != nil {
		n.t.Fatal(err)
	}
	var sum float64
	if fam := families[name]; fam != nil {
		for _, m := range fam.Metric {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// MarkUnhealthy makes gpu-plugin refuse to prepare the pod's device: a
// prepare that succeeds while the mark is there did not call the plugin.
func (n *node) MarkUnhealthy(pod *corev1.Pod) (unmark func()) {
	n.t.Helper()
	var devices []harness.SimulatedGPU
	for _, r := range n.allocatedDevices(pod) {
		devices = append(devices, harness.SimulatedGPU{Dir: filepath.Join(n.agent.DevRoot, r[0]), Device: r[1]})
	}
	remove, err := harness.MarkUnhealthy(devices...)
	if err != nil {
		n.t.Fatal(err)
	}
	return func() {
		if err := remove(); err != nil {
			n.t.Fatal(err)
		}
	}
}

// RestartNode stops the kubelet and the agent and starts both again on the
// same state directories.
func (n *node) RestartNode(bootID string) {
	n.t.Helper()
	n.StopKubelet()
	n.agent.Stop()
	if bootID != "" {
		if err := n.agent.SetBootID(bootID); err != nil {
			n.t.Fatal(err)
		}
		// /var/run is a tmpfs: a reboot takes the CDI specs with it.
		if err := harness.EmptyDir(n.agent.CDIDir); err != nil {
			n.t.Fatal(err)
		}
	}
	n.startAgent()
	n.startKubelet()
}

// A restart in the same boot answers from the record without calling the
// plugin; after a reboot the plugin runs again (scenarios.Reboot).
func TestRebootRunsPluginAgain(t *testing.T) {
	n := newNode(t)
	n.start()
	scenarios.Reboot(t, n)
}

// A force-deleted pod whose claim is gone from the API server is
// unprepared from the record (scenarios.ForceDeletedPod).
func TestForceDeletedPodUnprepares(t *testing.T) {
	n := newNode(t)
	n.start()
	scenarios.ForceDeletedPod(t, n)
}

// One claim with a device from each of two drivers, served by two
// gpu-plugin instances in one agent.
func TestClaimWithTwoDrivers(t *testing.T) {
	n := newNode(t,
		harness.GPUDriver{DriverName: gpuDriver, NumDevices: 4},
		harness.GPUDriver{DriverName: "gpu2.example.com", NumDevices: 4},
	)
	n.start()
	pods := n.SchedulePods("d", 2)
	n.PrepareAll(pods)
	ids := make([][]string, len(pods))
	for i, p := range pods {
		ids[i] = n.VerifyCDI(p)
		// Both devices are injected, at two different container paths
		// (both drivers' devices may be gpu-N).
		spec, err := harness.ResolveCDI(n.agent.CDIDir, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		paths := map[string]bool{}
		for _, d := range spec.Linux.Devices {
			paths[d.Path] = true
		}
		if len(paths) != 2 || len(spec.Linux.Devices) != 2 {
			t.Errorf("pod %s: the claim's two devices are injected as %v, want two distinct paths", p.Name, spec.Linux.Devices)
		}
		// ...and each device's variable is there, under its own name.
		envNames := map[string]bool{}
		for _, e := range spec.Process.Env {
			if name, _, _ := strings.Cut(e, "="); strings.HasPrefix(name, "GPU_DEVICE_") {
				envNames[name] = true
			}
		}
		if len(envNames) != 2 {
			t.Errorf("pod %s: the claim's two devices set %v, want two distinct GPU_DEVICE_ variables", p.Name, spec.Process.Env)
		}
		// Each driver's ID alone injects that driver's device.
		for _, r := range n.allocatedDevices(p) {
			var mine []string
			for _, id := range ids[i] {
				if strings.Contains(id, r[0]) {
					mine = append(mine, id)
				}
			}
			if len(mine) != 1 {
				t.Fatalf("pod %s: CDI IDs %v, want exactly one naming driver %s", p.Name, ids[i], r[0])
			}
			spec, err := harness.ResolveCDI(n.agent.CDIDir, mine)
			if err != nil {
				t.Fatal(err)
			}
			if len(spec.Linux.Devices) != 1 || spec.Linux.Devices[0].Path != gpuContainerPath(r[0], r[1]) {
				t.Errorf("pod %s: driver %s's CDI ID injects %v, want %s", p.Name, r[0], spec.Linux.Devices, r[1])
			}
		}
	}
	n.UnprepareAll(pods, ids)

	// One log format: each plugin's own line (gpu-plugin's "configured",
	// hclog JSON on its stderr) is in the agent process's output once, as
	// klog text naming the plugin and its level; no JSON line is.
	log := n.agent.Log()
	for _, d := range []string{gpuDriver, "gpu2.example.com"} {
		re := regexp.MustCompile(`(?m)^I\d{4} [^\n]*\] "configured" [^\n]*plugin="` + regexp.QuoteMeta(strings.ReplaceAll(d, ".", "-")) +
			`" level="info" [^\n]*driver="` + regexp.QuoteMeta(d) + `"`)
		if got := len(re.FindAllString(log, -1)); got != 1 {
			t.Errorf("plugin of %s: its \"configured\" line is in the agent's log %d times as klog text, want once:\n%s", d, got, n.agent.LogTail(40))
		}
	}
	if regexp.MustCompile(`(?m)^\{`).MatchString(log) || strings.Contains(log, `"@level"`) {
		t.Errorf("JSON lines in the agent's log:\n%s", log)
	}
}

// A plugin whose binary does not match its configured SHA-256 is refused
// before it runs, and only that plugin: the agent keeps serving its other
// driver (registered through the kubelet's own plugin manager, pods
// prepared through its DRA manager), the refused driver never registers
// nor publishes a slice, and the refusal is visible: an error log line
// naming the plugin and both digests, dranode_plugin_refused, and /readyz
// not ready naming the plugin.
func TestWrongChecksumRefused(t *testing.T) {
	const bad = "bad.example.com"
	const badPlugin = "bad-example-com" // the harness names plugins after their driver
	wrongSum := strings.Repeat("0", 64)
	n := newNode(t,
		harness.GPUDriver{DriverName: gpuDriver, NumDevices: 2},
		harness.GPUDriver{DriverName: bad, NumDevices: 2, SHA256: wrongSum},
	)
	n.StartKubelet()
	n.startAgent()
	// From here on the node serves the good driver alone.
	n.drivers = n.drivers[:1]
	n.WaitRegistered(gpuDriver, n.agent.Process)
	n.waitSlices()
	pods := n.SchedulePods("w", 2)
	n.PrepareAll(pods)
	ids := make([][]string, len(pods))
	for i, p := range pods {
		ids[i] = n.VerifyCDI(p)
	}

	select {
	case <-n.agent.Exited():
		t.Fatalf("agent exited with a refused plugin configured: %v", n.agent.ExitError())
	default:
	}
	realSum, err := harness.FileSHA256(bins.GPUPlugin)
	if err != nil {
		t.Fatal(err)
	}
	log := n.agent.Log()
	for _, want := range []string{"Driver plugin refused", `plugin="` + badPlugin + `"`, wrongSum, realSum} {
		if !strings.Contains(log, want) {
			t.Errorf("agent log does not contain %q:\n%s", want, n.agent.LogTail(20))
		}
	}
	resp, err := http.Get("http://" + n.agent.HTTPAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), badPlugin) {
		t.Errorf("/readyz %d %q, want 503 naming plugin %s", resp.StatusCode, body, badPlugin)
	}
	families, err := n.agent.Metrics(n.ctx)
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string]float64{}
	if fam := families["dranode_plugin_refused"]; fam != nil {
		for _, m := range fam.Metric {
			for _, l := range m.Label {
				if l.GetName() == "plugin" {
					refused[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	if refused[badPlugin] != 1 || refused["gpu-example-com"] != 0 || len(refused) != 2 {
		t.Errorf("dranode_plugin_refused = %v, want %s 1 and gpu-example-com 0", refused, badPlugin)
	}

	n.assertNotRegistered(bad)
	slices, err := cluster.NodeSlices(n.ctx, n.name)
	if err != nil {
		t.Fatal(err)
	}
	if got := harness.CountDevices(slices, bad); got != 0 {
		t.Errorf("the refused driver published %d devices", got)
	}
	entries, _ := os.ReadDir(n.agent.Opts.RegistryDir)
	for _, e := range entries {
		if strings.Contains(e.Name(), bad) {
			t.Errorf("registration socket %s exists for the refused driver", e.Name())
		}
	}
	n.UnprepareAll(pods, ids)
}

// A device the plugin reports unhealthy shows in its pod's status through
// the kubelet's own DRA manager, over each version of the health service:
// v1, which the 1.37 kubelet picks from what the agent announces, and
// v1alpha1, the only one the kubelets of 1.34 to 1.36 call (here the 1.37
// DRA manager's own v1alpha1 client, which it uses when v1alpha1 is the
// only version it shares with a plugin).
func TestDeviceHealthInPodStatus(t *testing.T) {
	for _, service := range []string{drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService} {
		t.Run(service, func(t *testing.T) {
			n := newNode(t)
			n.KnowHealthServices(service)
			n.start()
			pod := n.SchedulePods("h", 1)[0]
			n.PrepareAll([]*corev1.Pod{pod})
			unmark := n.MarkUnhealthy(pod)
			defer unmark()
			for {
				select {
				case u := <-n.Kubelet().DRA.Updates():
					if !slices.Contains(u.PodUIDs, string(pod.UID)) {
						continue
					}
				case <-n.ctx.Done():
					t.Fatal(n.ctx.Err())
				}
				st := corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name}}}
				n.Kubelet().DRA.UpdateAllocatedResourcesStatus(klog.Background(), pod, &st)
				health := map[string]corev1.ResourceHealthStatus{}
				for _, rs := range st.ContainerStatuses[0].AllocatedResourcesStatus {
					for _, r := range rs.Resources {
						health[string(r.ResourceID)] = r.Health
					}
				}
				t.Logf("pod status after a health update: %v", health)
				if len(health) == 1 && slices.Contains(slices.Collect(maps.Values(health)), corev1.ResourceHealthStatusUnhealthy) {
					return
				}
			}
		})
	}
}
