package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dranode/dranode/agent"
	"github.com/dranode/dranode/agent/config"
	"github.com/dranode/dranode/tools/envtest"
)

// healthPoll is the example plugin's health poll interval in these tests.
const healthPoll = 100 * time.Millisecond

// TestUnhealthyDeviceNotAllocated is issue 16's proof for device health,
// with the real kube-scheduler and the agent running the real example
// plugin process, on a control plane with default feature gates (device
// taints are GA and on by default in 1.37): a GPU the plugin reports
// unhealthy is tainted in the node's slice and the scheduler allocates
// only the other one; a second claim waits; when the GPU recovers the
// taint goes and the waiting claim gets it. The API server's audit log
// shows one slice update per health change and none while health stays as
// it is, across health polls, a restart of the plugin process and a
// restart of the agent.
func TestUnhealthyDeviceNotAllocated(t *testing.T) {
	env := &envtest.Environment{Scheduler: true, Audit: true}
	restCfg, client, ctx, cfg, devRoot := twoGPUs(t, env)
	reg := prometheus.NewRegistry()
	a := start(t, cfg, agent.Options{RESTConfig: restCfg, Registry: reg})
	taintKey := gpuDriver + "/unhealthy"

	waitTaints := func(what string, want map[string]string) {
		t.Helper()
		waitSliceTaints(t, ctx, client, what, want)
	}
	waitTaints("first publish", map[string]string{"gpu-0": "", "gpu-1": ""})
	writes := sliceWrites(t, env)
	if writes["create"] != 1 || len(writes) != 1 {
		t.Fatalf("slice writes for the first publish: %v, want one create", writes)
	}
	// No pause to show that nothing is written while health stays as it
	// is: every check of the writes below is exact, and the last one
	// counts the whole test's, so a write between two changes (a loop, or
	// a restart that rewrites) fails the next check.
	oneUpdate := func(what string, before map[string]int) {
		t.Helper()
		after := sliceWrites(t, env)
		want := map[string]int{}
		for k, v := range before {
			want[k] = v
		}
		want["update"]++
		if fmt.Sprint(after) != fmt.Sprint(want) {
			t.Errorf("%s: slice writes %v, want %v (one update more than %v)", what, after, want, before)
		}
	}

	// gpu0 becomes unhealthy.
	before := sliceWrites(t, env)
	marker := filepath.Join(devRoot, "gpu0.unhealthy")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	marked := time.Now()
	waitTaints("gpu0 unhealthy", map[string]string{"gpu-0": taintKey + "=NoSchedule", "gpu-1": ""})
	t.Logf("gpu0 marked unhealthy: taint in the stored slice after %s (plugin polls every %s)", time.Since(marked), healthPoll)
	oneUpdate("gpu0 unhealthy", before)
	if n := driverGauge(t, reg, "dranode_devices_tainted", gpuDriver); n != 1 {
		t.Errorf("dranode_devices_tainted = %v, want 1", n)
	}

	// A restart of the plugin process repeats its whole inventory and
	// health: nothing to write.
	before = sliceWrites(t, env)
	restartPlugin(t, ctx)
	if after := sliceWrites(t, env); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("plugin restart: slice writes went from %v to %v", before, after)
	}

	// A restart of the agent (an upgrade): the new agent's first publish
	// waits for the plugin's health, so the stored slice, taint included,
	// is already what it wants: nothing to write.
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	reg = prometheus.NewRegistry()
	start(t, cfg, agent.Options{RESTConfig: restCfg, Registry: reg})
	if err := poll(ctx, func() (bool, error) {
		return driverGauge(t, reg, "dranode_devices_tainted", gpuDriver) == 1, nil
	}); err != nil {
		t.Fatalf("the restarted agent never published gpu0 tainted: %v", err)
	}
	if after := sliceWrites(t, env); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("plugin and agent restart: slice writes went from %v to %v", before, after)
	}

	// New claims: the first lands on gpu1, the second waits.
	createPodWithClaim(t, ctx, client, "first")
	if dev := waitAllocated(t, ctx, client, "first"); dev != "gpu-1" {
		t.Fatalf("claim first got %s while gpu-0 is tainted", dev)
	}
	createPodWithClaim(t, ctx, client, "second")
	waitUnschedulable(t, ctx, client, "second")
	if c, err := client.ResourceV1().ResourceClaims("default").Get(ctx, "second", metav1.GetOptions{}); err != nil || c.Status.Allocation != nil {
		t.Fatalf("claim second: %v, allocation %+v; want it pending", err, c.Status.Allocation)
	}

	// gpu0 recovers: the taint goes, and the waiting claim gets gpu0.
	before = sliceWrites(t, env)
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	recovered := time.Now()
	waitTaints("gpu0 healthy again", map[string]string{"gpu-0": "", "gpu-1": ""})
	untainted := time.Since(recovered)
	oneUpdate("gpu0 healthy again", before)
	if dev := waitAllocated(t, ctx, client, "second"); dev != "gpu-0" {
		t.Fatalf("claim second got %s, want gpu-0", dev)
	}
	t.Logf("gpu0 healthy again: taint gone after %s, the waiting claim allocated gpu-0 and its pod bound after %s", untainted, time.Since(recovered))
	if n := driverGauge(t, reg, "dranode_devices_tainted", gpuDriver); n != 0 {
		t.Errorf("dranode_devices_tainted = %v, want 0", n)
	}
	// Over the whole test: the first publish and one update per health
	// change, nothing else (no delete, no re-create, no other update).
	if total := sliceWrites(t, env); fmt.Sprint(total) != fmt.Sprint(map[string]int{"create": 1, "update": 2}) {
		t.Errorf("slice writes over the whole test: %v, want one create and two updates", total)
	}
}

// With DRADeviceTaints off, the 1.37 API server drops Device.taints from
// slices it stores (pkg/registry/resource/resourceslice/strategy.go,
// dropDisabledDRADeviceTaintsFields); with the default it keeps them.
func TestDeviceTaintsNeedTheAPIServerGate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		kept  bool
	}{
		{"default", nil, true},
		{"DRADeviceTaints=false,DRADeviceTaintRules=false", []string{"--feature-gates=DRADeviceTaints=false,DRADeviceTaintRules=false"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := kubernetes.NewForConfigOrDie(envtest.StartT(t, &envtest.Environment{APIServerFlags: tc.flags}))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			created, err := client.ResourceV1().ResourceSlices().Create(ctx, taintedSlice("gpu-0"), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := sliceTaints([]resourcev1.ResourceSlice{*created})["gpu-0"]
			if want := map[bool]string{true: gpuDriver + "/unhealthy=NoSchedule", false: ""}[tc.kept]; got != want {
				t.Errorf("stored taints of gpu-0: %q, want %q", got, want)
			}
		})
	}
}

// With DRADeviceTaints off in kube-scheduler (and on in the API server), the
// scheduler ignores device taints and allocates a tainted device: the gate
// must be on in the scheduler too.
func TestDeviceTaintsNeedTheSchedulerGate(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(envtest.StartT(t, &envtest.Environment{
		Scheduler: true, SchedulerFlags: []string{"--feature-gates=DRADeviceTaints=false,DRADeviceTaintRules=false"},
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	schedulableNode(t, ctx, client)
	prepareNamespace(t, ctx, client)
	if _, err := client.ResourceV1().ResourceSlices().Create(ctx, taintedSlice("gpu-0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPodWithClaim(t, ctx, client, "ignores-taint")
	if dev := waitAllocated(t, ctx, client, "ignores-taint"); dev != "gpu-0" {
		t.Fatalf("allocated %s, want the tainted gpu-0 (the only device)", dev)
	}
}

// Where the API server keeps no device taints (DRADeviceTaints off: the
// default of Kubernetes 1.34 and 1.35, here the 1.37 server and scheduler
// with the gate off, which 1.37 still allows), the agent learns it before
// its first write, from a dry-run create of a tainted device, says so once
// (log, dranode_device_taints_unused) and leaves an unhealthy GPU out of
// the slice instead of tainting it: the scheduler gives a new claim only
// the healthy one, a second claim waits, and when the GPU recovers it is
// published again and the waiting claim gets it. The audit log shows the
// writes: the first publish, the withdrawal, the return, and nothing else
// (no tainted update the server would store untainted, no write loop).
func TestUnhealthyDeviceWithdrawnWithoutTaints(t *testing.T) {
	gates := []string{"--feature-gates=DRADeviceTaints=false,DRADeviceTaintRules=false"}
	env := &envtest.Environment{Scheduler: true, Audit: true, APIServerFlags: gates, SchedulerFlags: gates}
	restCfg, client, ctx, cfg, devRoot := twoGPUs(t, env)
	reg := prometheus.NewRegistry()
	start(t, cfg, agent.Options{RESTConfig: restCfg, Registry: reg})
	waitDevices := func(what string, want map[string]string) {
		t.Helper()
		waitSliceTaints(t, ctx, client, what, want)
	}
	waitDevices("first publish", map[string]string{"gpu-0": "", "gpu-1": ""})
	if n := gauge(t, reg, "dranode_device_taints_unused"); n != 1 {
		t.Errorf("dranode_device_taints_unused = %v after the first publish, want 1 (the dry-run probe found the taints dropped)", n)
	}

	marker := filepath.Join(devRoot, "gpu0.unhealthy")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitDevices("gpu0 unhealthy", map[string]string{"gpu-1": ""})
	if n := gauge(t, reg, "dranode_device_taints_unused"); n != 1 {
		t.Errorf("dranode_device_taints_unused = %v, want 1", n)
	}
	if n := driverGauge(t, reg, "dranode_devices_withdrawn", gpuDriver); n != 1 {
		t.Errorf("dranode_devices_withdrawn = %v, want 1", n)
	}
	// Nothing more until the next change: the whole test's count at its
	// end is exact, with the scheduling of two claims in between.
	before := sliceWrites(t, env)
	if want := map[string]int{"create": 1, "update": 1}; fmt.Sprint(before) != fmt.Sprint(want) {
		t.Errorf("slice writes up to the withdrawal: %v, want %v (create; the withdrawal)", before, want)
	}

	createPodWithClaim(t, ctx, client, "first")
	if dev := waitAllocated(t, ctx, client, "first"); dev != "gpu-1" {
		t.Fatalf("claim first got %s while gpu-0 is unhealthy", dev)
	}
	createPodWithClaim(t, ctx, client, "second")
	waitUnschedulable(t, ctx, client, "second")

	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	waitDevices("gpu0 healthy again", map[string]string{"gpu-0": "", "gpu-1": ""})
	if dev := waitAllocated(t, ctx, client, "second"); dev != "gpu-0" {
		t.Fatalf("claim second got %s, want gpu-0", dev)
	}
	if n := driverGauge(t, reg, "dranode_devices_withdrawn", gpuDriver); n != 0 {
		t.Errorf("dranode_devices_withdrawn = %v, want 0", n)
	}
	if total := sliceWrites(t, env); fmt.Sprint(total) != fmt.Sprint(map[string]int{"create": 1, "update": 2}) {
		t.Errorf("slice writes over the whole test: %v, want one create and two updates", total)
	}
}

// The first real write still tells when the server changes under a running
// agent: here the API server is restarted with device taints turned off
// (a control plane reconfigured, or rolled back) after the agent's probe
// found them kept. The GPU that then turns unhealthy is sent tainted, the
// server stores it untainted, and the agent withdraws it, says so once,
// and puts it back when healthy. The writes: the first publish, the
// tainted update stored untainted, the withdrawal, the return.
func TestTaintsDroppedAfterAPIServerRestart(t *testing.T) {
	env := &envtest.Environment{Audit: true}
	restCfg, client, ctx, cfg, devRoot := twoGPUs(t, env)
	reg := prometheus.NewRegistry()
	start(t, cfg, agent.Options{RESTConfig: restCfg, Registry: reg})
	waitSliceTaints(t, ctx, client, "first publish", map[string]string{"gpu-0": "", "gpu-1": ""})
	if n := gauge(t, reg, "dranode_device_taints_unused"); n != 0 {
		t.Errorf("dranode_device_taints_unused = %v with the server's default gates, want 0", n)
	}

	if err := env.RestartAPIServer("--feature-gates=DRADeviceTaints=false,DRADeviceTaintRules=false"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(devRoot, "gpu0.unhealthy"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitSliceTaints(t, ctx, client, "gpu0 unhealthy", map[string]string{"gpu-1": ""})
	if n := gauge(t, reg, "dranode_device_taints_unused"); n != 1 {
		t.Errorf("dranode_device_taints_unused = %v after a slice was stored without its taint, want 1", n)
	}
	if err := os.Remove(filepath.Join(devRoot, "gpu0.unhealthy")); err != nil {
		t.Fatal(err)
	}
	waitSliceTaints(t, ctx, client, "gpu0 healthy again", map[string]string{"gpu-0": "", "gpu-1": ""})
	if total := sliceWrites(t, env); fmt.Sprint(total) != fmt.Sprint(map[string]int{"create": 1, "update": 3}) {
		t.Errorf("slice writes over the whole test: %v, want one create and three updates (the tainted one stored untainted, the withdrawal, the return)", total)
	}
}

// twoGPUs starts env's control plane with nodeName schedulable and the
// default namespace ready, and returns an agent configuration with two
// simulated GPUs whose health the plugin polls every healthPoll, and the
// directory of their unhealthy marks. The context ends with the test, at
// the latest in 4 minutes.
func twoGPUs(t *testing.T, env *envtest.Environment) (*rest.Config, kubernetes.Interface, context.Context, config.Config, string) {
	t.Helper()
	restCfg := envtest.StartT(t, env)
	client := kubernetes.NewForConfigOrDie(restCfg)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	schedulableNode(t, ctx, client)
	prepareNamespace(t, ctx, client)
	cfg := nodeConfig(t)
	drv := &cfg.Plugins.Drivers[0]
	drv.Config["numDevices"] = 2
	drv.Config["healthPollInterval"] = healthPoll.String()
	return restCfg, client, ctx, cfg, drv.Config["devRoot"].(string)
}

// waitSliceTaints waits until nodeName's stored slices hold exactly the
// devices of want, each with the taints want gives it (sliceTaints' form).
func waitSliceTaints(t *testing.T, ctx context.Context, client kubernetes.Interface, what string, want map[string]string) {
	t.Helper()
	var last map[string]string
	err := poll(ctx, func() (bool, error) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
		if err != nil {
			return false, err
		}
		last = sliceTaints(list.Items)
		return fmt.Sprint(last) == fmt.Sprint(want), nil
	})
	if err != nil {
		t.Fatalf("%s: slices' devices and taints %v, want %v: %v", what, last, want, err)
	}
}

// taintedSlice is a slice of nodeName with the one device dev, tainted as
// the agent taints an unhealthy device.
func taintedSlice(dev string) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "tainted"},
		Spec: resourcev1.ResourceSliceSpec{
			Driver: gpuDriver, NodeName: ptrTo(nodeName),
			Pool: resourcev1.ResourcePool{Name: nodeName, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: dev, Taints: []resourcev1.DeviceTaint{{
				Key: gpuDriver + "/unhealthy", Effect: resourcev1.DeviceTaintEffectNoSchedule,
			}}}},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

// sliceTaints lists each device's taints as "key=effect" (comma-separated),
// "" for none.
func sliceTaints(items []resourcev1.ResourceSlice) map[string]string {
	out := map[string]string{}
	for _, s := range items {
		for _, d := range s.Spec.Devices {
			var ts []string
			for _, ta := range d.Taints {
				ts = append(ts, ta.Key+"="+string(ta.Effect))
			}
			out[d.Name] = strings.Join(ts, ",")
		}
	}
	return out
}

// sliceWrites counts the completed ResourceSlice writes in the audit log by
// verb.
func sliceWrites(t *testing.T, env *envtest.Environment) map[string]int {
	t.Helper()
	events, err := env.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, ev := range events {
		if ev.ObjectRef != nil && ev.ObjectRef.Resource == "resourceslices" && ev.Write() {
			out[ev.Verb]++
		}
	}
	return out
}

// driverGauge is the value of a gauge with a driver label.
func driverGauge(t *testing.T, reg *prometheus.Registry, name, driver string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "driver" && l.GetValue() == driver {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no gauge %s{driver=%q} among the agent's metrics", name, driver)
	return 0
}

// schedulableNode creates nodeName as a kubelet would leave it for the
// scheduler: Ready, with allocatable pods, without the not-ready taint
// admission puts on a new node (no node lifecycle controller runs to take
// it away).
func schedulableNode(t *testing.T, ctx context.Context, client kubernetes.Interface) {
	t.Helper()
	node, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: nodeName, Labels: map[string]string{"kubernetes.io/hostname": nodeName},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(node.Spec.Taints) > 0 {
		node.Spec.Taints = nil
		if node, err = client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	now := metav1.Now()
	node.Status.Capacity, node.Status.Allocatable = capacity, capacity
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// prepareNamespace does kube-controller-manager's part for namespace
// default (its ServiceAccount, without which pods are refused) and creates
// the DeviceClass "gpu" of gpuDriver's devices.
func prepareNamespace(t *testing.T, ctx context.Context, client kubernetes.Interface) {
	t.Helper()
	_, err := client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = client.ResourceV1().DeviceClasses().Create(ctx, &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: strconv.Quote(gpuDriver) + " == device.driver"},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// createPodWithClaim creates claim name (one device of class gpu) and pod
// name using it.
func createPodWithClaim(t *testing.T, ctx context.Context, client kubernetes.Interface, name string) {
	t.Helper()
	_, err := client.ResourceV1().ResourceClaims("default").Create(ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu"},
		}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptrTo(name)}},
			Containers: []corev1.Container{{
				Name: "c", Image: "pause",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// waitAllocated waits for the scheduler to allocate claim name and bind
// its pod, and returns the device allocated.
func waitAllocated(t *testing.T, ctx context.Context, client kubernetes.Interface, name string) string {
	t.Helper()
	var dev string
	err := poll(ctx, func() (bool, error) {
		pod, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || pod.Spec.NodeName == "" {
			return false, err
		}
		c, err := client.ResourceV1().ResourceClaims("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || c.Status.Allocation == nil {
			return false, err
		}
		if r := c.Status.Allocation.Devices.Results; len(r) == 1 {
			dev = r[0].Device
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("claim %s not allocated and its pod not bound: %v", name, err)
	}
	return dev
}

// waitUnschedulable waits until the scheduler has tried pod name and found
// no node for it.
func waitUnschedulable(t *testing.T, ctx context.Context, client kubernetes.Interface, name string) {
	t.Helper()
	var last []corev1.PodCondition
	err := poll(ctx, func() (bool, error) {
		pod, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = pod.Status.Conditions
		return slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}), nil
	})
	if err != nil {
		t.Fatalf("pod %s never reported unschedulable (conditions %+v): %v", name, last, err)
	}
}

// poll calls cond every 50 ms until it returns true or an error, or ctx
// ends.
func poll(ctx context.Context, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// restartPlugin kills the agent's gpu-plugin process (a child of this test
// process) and waits for its successor.
func restartPlugin(t *testing.T, ctx context.Context) {
	t.Helper()
	old := pluginPIDs(t)
	if len(old) != 1 {
		t.Fatalf("gpu-plugin processes of this test: %v, want one", old)
	}
	if err := syscall.Kill(old[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := poll(ctx, func() (bool, error) {
		now := pluginPIDs(t)
		return len(now) == 1 && now[0] != old[0], nil
	})
	if err != nil {
		t.Fatalf("gpu-plugin not restarted after pid %d was killed: %v", old[0], err)
	}
}

// pluginPIDs are the running gpu-plugin processes whose parent is this
// process.
func pluginPIDs(t *testing.T) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces, so split after ')'.
		s := string(data)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if s[open+1:end] != "gpu-plugin" || len(fields) < 2 || fields[0] == "Z" || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(s[:open]))
		out = append(out, pid)
	}
	return out
}
