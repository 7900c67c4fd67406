package node_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dranode/dranode/scripts/image/workload"
)

const (
	claimTemplateSample = "gpu-claim-template.yaml"
	podSample           = "gpu-pod.yaml"
	driverName          = "gpu.example.com"
)

// cdiSpec is the part of a CDI spec the checks read.
type cdiSpec struct {
	Kind    string `json:"kind"`
	Devices []struct {
		Name           string         `json:"name"`
		ContainerEdits containerEdits `json:"containerEdits"`
	} `json:"devices"`
	ContainerEdits containerEdits `json:"containerEdits"`
}

type containerEdits struct {
	Env         []string `json:"env"`
	DeviceNodes []struct {
		Path        string `json:"path"`
		HostPath    string `json:"hostPath"`
		Type        string `json:"type"`
		Major       int64  `json:"major"`
		Minor       int64  `json:"minor"`
		Permissions string `json:"permissions"`
	} `json:"deviceNodes"`
	Mounts []struct {
		HostPath      string `json:"hostPath"`
		ContainerPath string `json:"containerPath"`
	} `json:"mounts"`
}

// specFor reads the CDI spec the agent wrote for a claim: the file whose name
// holds the claim's UID.
func (c *cluster) specFor(claim *resourcev1.ResourceClaim) (string, cdiSpec) {
	c.t.Helper()
	for _, name := range c.cdiSpecs() {
		if !strings.Contains(name, string(claim.UID)) {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(c.node.CDIDir(), name))
		if err != nil {
			c.t.Fatal(err)
		}
		var s cdiSpec
		if err := json.Unmarshal(raw, &s); err != nil {
			c.t.Fatalf("CDI spec %s: %v", name, err)
		}
		return name, s
	}
	c.t.Fatalf("no CDI spec for claim %s (UID %s) in %s: %v", claim.Name, claim.UID, c.node.CDIDir(), c.cdiSpecs())
	return "", cdiSpec{}
}

// checkContainerSawSpec checks that the container got every edit of the
// spec: each environment variable, each device node with the type and
// numbers of its host node, each mount.
func checkContainerSawSpec(t testing.TB, r workload.Report, spec cdiSpec) {
	t.Helper()
	edits := []containerEdits{spec.ContainerEdits}
	for _, d := range spec.Devices {
		edits = append(edits, d.ContainerEdits)
	}
	var nodes, envs int
	for _, e := range edits {
		for _, kv := range e.Env {
			name, value, _ := strings.Cut(kv, "=")
			got, ok := r.Getenv(name)
			if !ok || got != value {
				t.Errorf("container env %s = %q (set: %v), CDI spec says %q", name, got, ok, value)
			}
			envs++
		}
		for _, dn := range e.DeviceNodes {
			dev, ok := r.Device(dn.Path)
			if !ok {
				t.Errorf("container has no device node %s (CDI spec: host %s)", dn.Path, dn.HostPath)
				continue
			}
			host := dn.HostPath
			if host == "" {
				host = dn.Path
			}
			var st syscall.Stat_t
			if err := syscall.Stat(host, &st); err != nil {
				t.Fatal(err)
			}
			if dev.Major != uint32(st.Rdev>>8&0xfff) || dev.Minor != uint32(st.Rdev&0xff|(st.Rdev>>12)&0xfff00) {
				t.Errorf("container device %s is %d:%d, host %s is %d:%d", dn.Path, dev.Major, dev.Minor, host, st.Rdev>>8&0xfff, st.Rdev&0xff)
			}
			nodes++
		}
		for _, m := range e.Mounts {
			if _, ok := r.MountAt(m.ContainerPath); !ok {
				t.Errorf("container has no mount at %s (CDI spec: host %s)", m.ContainerPath, m.HostPath)
			}
		}
	}
	if envs == 0 || nodes == 0 {
		t.Errorf("the CDI spec has %d environment variables and %d device nodes; the gpu plugin sets both", envs, nodes)
	}
}

// startClaimPod creates a pod from the samples (its claim from the sample
// template) and waits until it runs.
func (c *cluster) startClaimPod(name string) (*corev1.Pod, *resourcev1.ResourceClaim) {
	c.t.Helper()
	c.createPod(c.workloadPod(name, podSample))
	p := c.waitRunning("default", name)
	return p, c.claimOf(p)
}

// endPods deletes the pods and waits until the kubelet has unprepared every
// claim: pods gone, no CDI spec left, the agent's record empty.
func (c *cluster) endPods(why string, pods ...*corev1.Pod) {
	c.t.Helper()
	for _, p := range pods {
		c.deletePod(p.Namespace, p.Name)
	}
	for _, p := range pods {
		c.waitPodGone(p.Namespace, p.Name)
	}
	c.waitNoSpecs(why)
	c.waitRecorded(0)
}

func (c *cluster) waitNoSpecs(what string) {
	c.t.Helper()
	eventually(c, what, func() ([]string, bool) {
		s := c.cdiSpecs()
		return s, len(s) == 0
	}, func() string { return fmt.Sprint(c.cdiSpecs()) })
}

func (c *cluster) waitRecorded(n float64) {
	c.t.Helper()
	var last string
	eventually(c, fmt.Sprintf("%v claims in the agent's record", n), func() (struct{}, bool) {
		m, err := c.metrics()
		last = fmt.Sprint(m["dranode_claims_recorded"], err)
		return struct{}{}, err == nil && m["dranode_claims_recorded"] == n
	}, func() string { return last })
}

// Scenarios 1 and 2: the chart's agent registers with the real kubelet and
// publishes its slices; a sample pod is scheduled, prepared and started,
// and its container shows what the CDI spec says; deleting the pod
// unprepares the claim, removes the spec and empties the record.
func TestSamplePodSeesItsDevices(t *testing.T) {
	// The shipped gpu driver, one shared GPU (allowMultipleAllocations)
	// for the shares and one partitioned GPU (shared counters) for the
	// partition at the end, with device metadata files on. Shares and
	// partitions only where the API server has them on by default
	// (DRAConsumableCapacity, DRAPartitionableDevices: 1.36): before, it
	// would drop the fields, and the agent refuses shared counters to a
	// 1.34 server outright.
	m := testMinors(t)
	gpu := map[string]any{}
	sharesAndPartitions := m.apiServer >= 36
	if sharesAndPartitions {
		gpu = map[string]any{"sharedGPUs": 1, "partitionedGPUs": 1}
	}
	c := startCluster(t, map[string]any{"deviceMetadata": true, "drivers": map[string]any{"gpu": map[string]any{
		"sha256": testImages.pluginSHA256["gpu"],
		"config": gpu,
	}}})
	slices, err := c.client.ResourceV1().ResourceSlices().List(c.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + c.node.Name()})
	if err != nil || len(slices.Items) == 0 {
		t.Fatalf("no ResourceSlices for node %s (%v)", c.node.Name(), err)
	}
	for _, s := range slices.Items {
		if s.Spec.Driver != driverName {
			t.Errorf("slice %s of driver %s, want %s only", s.Name, s.Spec.Driver, driverName)
		}
	}
	c.applySample(claimTemplateSample)
	p, claim := c.startClaimPod("gpu-pod")
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s not allocated one device: %+v", claim.Name, claim.Status)
	}
	name, spec := c.specFor(claim)
	r := c.report(p.Namespace, p.Name)
	checkContainerSawSpec(t, r, spec)
	checkRunbookPodOutput(t, r)
	allocated := claim.Status.Allocation.Devices.Results[0].Device
	t.Logf("pod %s got %s through %s: %d env, devices %v", p.Name, allocated, name, len(r.Env), r.Devices)
	if got := c.metric("dranode_claims_recorded"); got != 1 {
		t.Errorf("record holds %v claims, want 1", got)
	}

	checkOneLogFormat(t, c)
	// The agent writes the plugin's device status into the claim
	// (KEP-4817) with the chart's RBAC: its service account's token is
	// bound to this node, which the per-driver check requires.
	var lastStatus string
	eventually(c, "the device status in the claim", func() (struct{}, bool) {
		got, err := c.client.ResourceV1().ResourceClaims(claim.Namespace).Get(c.ctx, claim.Name, metav1.GetOptions{})
		if err != nil {
			lastStatus = err.Error()
			return struct{}{}, false
		}
		lastStatus = fmt.Sprintf("%+v", got.Status.Devices)
		for _, d := range got.Status.Devices {
			if d.Driver == driverName && d.Device == allocated && len(d.Conditions) > 0 {
				return struct{}{}, true
			}
		}
		return struct{}{}, false
	}, func() string {
		m, _ := c.metrics()
		var errs []string
		for k, v := range m {
			if strings.HasPrefix(k, "dranode_claim_status_write") {
				errs = append(errs, fmt.Sprint(k, "=", v))
			}
		}
		return fmt.Sprintf("%s; %v", lastStatus, errs)
	})
	// The chart mounts the kubelet's root where the agent looks for the
	// kubelet's DRA checkpoint: the leftover sweep reads it.
	if got := c.metric(`dranode_record_sweeps_total{result="swept"}`); got < 1 {
		m, _ := c.metrics()
		t.Errorf("the agent's leftover sweep never read the kubelet's checkpoint: sweeps %v / missing %v / unreadable %v", got,
			m[`dranode_record_sweeps_total{result="kubelet-checkpoint-missing"}`], m[`dranode_record_sweeps_total{result="kubelet-checkpoint-unreadable"}`])
	}

	checkAdminAccessOnDeviceInUse(t, c, p, claim)

	c.endPods("the claim's CDI spec removed on unprepare", p)
	if sharesAndPartitions {
		checkTwoSharesSideBySide(t, c)
		checkPartitionWithMetadata(t, c)
	} else {
		t.Logf("shares and partitions skipped on %s: DRAConsumableCapacity and DRAPartitionableDevices are alpha and off by default before 1.36", m)
	}
	if got := c.metric(fmt.Sprintf("dranode_unprepare_errors_total{driver=%q}", driverName)); got != 0 {
		t.Errorf("%v unprepare errors", got)
	}
}

// Scenario 3: the agent's pod is deleted while workload pods run. The
// DaemonSet brings it back; nothing is prepared again; the pods' claims are
// unprepared normally when the pods end.
func TestAgentPodReplacedWhilePodsRun(t *testing.T) {
	c := startCluster(t, nil)
	c.applySample(claimTemplateSample)
	var pods []*corev1.Pod
	specs := map[string]os.FileInfo{}
	for i := range 3 {
		p, claim := c.startClaimPod(fmt.Sprintf("gpu-pod-%d", i))
		pods = append(pods, p)
		name, _ := c.specFor(claim)
		fi, err := os.Stat(filepath.Join(c.node.CDIDir(), name))
		if err != nil {
			t.Fatal(err)
		}
		specs[name] = fi
	}
	old := c.agentPod()
	c.deletePod(agentNS, old.Name)
	var last string
	fresh := c.eventually("a new agent pod Ready", func() (*corev1.Pod, bool) {
		p := c.agentPod()
		if p == nil || p.UID == old.UID {
			last = "the old pod"
			return nil, false
		}
		last = fmt.Sprintf("%s %v", p.Name, p.Status.ContainerStatuses)
		return p, podReady(p)
	}, func() string { return last })
	t.Logf("agent pod %s replaced by %s", old.Name, fresh.Name)
	if got := c.metric("dranode_claims_recorded"); got != 3 {
		t.Errorf("the new agent's record holds %v claims, want the 3 the old one prepared", got)
	}
	m, err := c.metrics()
	if err != nil {
		t.Fatal(err)
	}
	if n := m[fmt.Sprintf("dranode_prepare_duration_seconds_count{driver=%q}", driverName)]; n != 0 {
		t.Errorf("the new agent prepared %v claims; the running pods' claims were prepared already", n)
	}
	for name, before := range specs {
		after, err := os.Stat(filepath.Join(c.node.CDIDir(), name))
		if err != nil || !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
			t.Errorf("CDI spec %s rewritten or removed while its pod ran (%v)", name, err)
		}
	}
	for _, p := range pods {
		got, err := c.client.CoreV1().Pods(p.Namespace).Get(c.ctx, p.Name, metav1.GetOptions{})
		if err != nil || got.Status.Phase != corev1.PodRunning || got.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s disturbed by the agent's replacement: %v %+v", p.Name, err, got.Status.ContainerStatuses)
		}
	}
	c.endPods("every claim unprepared by the new agent", pods...)
	if n := c.metric(fmt.Sprintf("dranode_unprepare_duration_seconds_count{driver=%q}", driverName)); n != 3 {
		t.Errorf("the new agent unprepared %v claims, want 3", n)
	}
}

// Scenario 4: the kubelet restarts while pods run. Pods stay running with
// the same containers, nothing is prepared again, later deletes unprepare.
func TestKubeletRestartWhilePodsRun(t *testing.T) {
	c := startCluster(t, nil)
	c.applySample(claimTemplateSample)
	var pods []*corev1.Pod
	for i := range 3 {
		p, _ := c.startClaimPod(fmt.Sprintf("gpu-pod-%d", i))
		pods = append(pods, p)
	}
	prepared := c.metric(fmt.Sprintf("dranode_prepare_duration_seconds_count{driver=%q}", driverName))
	registrations, err := c.agentRegistrations()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.node.StopKubelet(); err != nil {
		t.Fatal(err)
	}
	if err := c.node.StartKubelet(c.ctx); err != nil {
		t.Fatal(err)
	}
	// The new kubelet registers the plugin again and syncs every pod (the
	// claim pods and the agent's): the checks below mean something only
	// after both.
	var lastErr error
	eventually(c, "the restarted kubelet registering the plugin", func() (int, bool) {
		n, err := c.agentRegistrations()
		lastErr = err
		return n, err == nil && n > registrations
	}, func() string { return fmt.Sprint(registrations, " registrations before the restart; ", lastErr) })
	var syncs float64
	eventually(c, "the restarted kubelet syncing every pod", func() (float64, bool) {
		syncs = c.kubeletPodSyncs()
		return syncs, syncs >= float64(len(pods)+1)
	}, func() string { return fmt.Sprint(syncs, " pod syncs") })
	for _, p := range pods {
		got := c.waitRunning(p.Namespace, p.Name)
		if got.Status.ContainerStatuses[0].ContainerID != p.Status.ContainerStatuses[0].ContainerID || got.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s's container changed across the kubelet restart: %+v -> %+v", p.Name, p.Status.ContainerStatuses[0], got.Status.ContainerStatuses[0])
		}
	}
	if n := c.metric(fmt.Sprintf("dranode_prepare_errors_total{driver=%q}", driverName)); n != 0 {
		t.Errorf("%v prepare errors", n)
	}
	after := c.metric(fmt.Sprintf("dranode_prepare_duration_seconds_count{driver=%q}", driverName))
	t.Logf("prepare calls: %v before the kubelet restart, %v after (a call for a recorded claim is answered from the record)", prepared, after)
	if got := c.metric("dranode_claims_recorded"); got != 3 {
		t.Errorf("record holds %v claims, want 3", got)
	}
	c.endPods("every claim unprepared after the kubelet restart", pods...)
}

// Scenario 5: a chart whose sha256 for one plugin does not match the
// binary. The agent's pod is not ready and says why; that driver publishes
// nothing; the other driver is unaffected.
func TestWrongPluginChecksumInChart(t *testing.T) {
	const other = "gpu2.example.com"
	// The shipped gpu driver, and a second instance of the same plugin
	// whose sha256 is wrong.
	drivers := map[string]any{
		"gpu": map[string]any{"sha256": testImages.pluginSHA256["gpu"]},
		"gpu2": map[string]any{"path": "/opt/dranode/plugins/gpu-plugin", "sha256": strings.Repeat("ab", 32),
			"config": map[string]any{"driverName": other, "numDevices": 2}},
	}
	c := startClusterNotReady(t, map[string]any{"drivers": drivers})
	p := c.agentPod()
	var last string
	eventually(c, "the agent's log naming the refused plugin", func() (struct{}, bool) {
		log, err := c.agentLog(p, false)
		last = tailLines(log, 5) + fmt.Sprint(err)
		return struct{}{}, err == nil && strings.Contains(log, "gpu2") && strings.Contains(log, strings.Repeat("ab", 32))
	}, func() string { return last })
	// Judge readiness only after the kubelet has probed it and the agent
	// answered not ready: a probe made while the agent starts fails too,
	// refused before the agent serves HTTP (a make check read the metrics
	// right after such a failure, and was refused as well).
	var probes []string
	eventually(c, "a readiness probe the agent answered 503", func() (struct{}, bool) {
		ev, err := c.client.CoreV1().Events(agentNS).List(c.ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + p.Name + ",reason=Unhealthy"})
		if err != nil {
			return struct{}{}, false
		}
		probes = probes[:0]
		for _, e := range ev.Items {
			probes = append(probes, e.Message)
			if strings.Contains(e.Message, "statuscode: 503") {
				return struct{}{}, true
			}
		}
		return struct{}{}, false
	}, func() string { return fmt.Sprintf("Unhealthy events: %q", probes) })
	p, err := c.client.CoreV1().Pods(agentNS).Get(c.ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if podReady(p) {
		t.Errorf("agent pod Ready with a refused plugin")
	}
	if v := c.metric(`dranode_plugin_refused{plugin="gpu2"}`); v != 1 {
		t.Errorf("dranode_plugin_refused{plugin=gpu2} = %v", v)
	}
	sl, err := c.client.ResourceV1().ResourceSlices().List(c.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	drv := map[string]int{}
	for _, s := range sl.Items {
		drv[s.Spec.Driver]++
	}
	if drv[other] != 0 || drv[driverName] == 0 {
		t.Errorf("slices by driver %v: want %s's and none of %s", drv, driverName, other)
	}
	c.applySample(claimTemplateSample)
	pod, claim := c.startClaimPod("gpu-pod")
	_, spec := c.specFor(claim)
	checkContainerSawSpec(t, c.report(pod.Namespace, pod.Name), spec)
}

// startClusterNotReady is startCluster for an agent that is expected to
// stay unready: it waits for the agent's container to run instead.
func startClusterNotReady(t testing.TB, values map[string]any) *cluster {
	t.Helper()
	c := startClusterOpts(t, clusterOptions{values: func(*cluster) map[string]any { return values }, noWait: true})
	var last string
	c.eventually("the agent's container running", func() (*corev1.Pod, bool) {
		p := c.agentPod()
		if p == nil || len(p.Status.ContainerStatuses) == 0 {
			last = "no pod or no container"
			return nil, false
		}
		last = fmt.Sprint(p.Status.ContainerStatuses[0].State)
		return p, p.Status.ContainerStatuses[0].State.Running != nil
	}, func() string { return last })
	return c
}

// Scenario 6: 20 pods with claims and 20 without, created together, all
// reach Running.
func TestFortyPodsTogether(t *testing.T) {
	c := startCluster(t, gpus(24))
	c.applySample(claimTemplateSample)
	var wg sync.WaitGroup
	var names []string
	for i := range 40 {
		sample, name := podSample, fmt.Sprintf("claim-%02d", i)
		if i%2 == 1 {
			sample, name = "", fmt.Sprintf("plain-%02d", i)
		}
		names = append(names, name)
		p := c.workloadPod(name, sample)
		wg.Go(func() { c.createPod(p) })
	}
	wg.Wait()
	devices := map[string]string{}
	for _, n := range names {
		p := c.waitRunning("default", n)
		if strings.HasPrefix(n, "claim-") {
			claim := c.claimOf(p)
			d := claim.Status.Allocation.Devices.Results[0].Device
			if other, dup := devices[d]; dup {
				t.Errorf("device %s given to %s and %s", d, other, n)
			}
			devices[d] = n
			_, spec := c.specFor(claim)
			checkContainerSawSpec(t, c.report(p.Namespace, p.Name), spec)
		}
	}
	if len(devices) != 20 || len(c.cdiSpecs()) != 20 {
		t.Errorf("%d devices allocated, %d CDI specs; want 20 each", len(devices), len(c.cdiSpecs()))
	}
	for _, n := range names {
		c.deletePod("default", n)
	}
	for _, n := range names {
		c.waitPodGone("default", n)
	}
	c.waitNoSpecs("all 20 claims unprepared")
	c.waitRecorded(0)
}

// gpus are chart values for the gpu plugin with n GPUs (the chart ships 8).
func gpus(n int) map[string]any {
	return map[string]any{"drivers": map[string]any{"gpu": map[string]any{
		"sha256": testImages.pluginSHA256["gpu"],
		"config": map[string]any{"numDevices": n},
	}}}
}

// klogLine is the header of a klog text line: severity, date, time, thread,
// file:line.
var klogLine = regexp.MustCompile(`^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d{6}\s+\d+ [^ ]+:\d+\] `)

// checkOneLogFormat reads the agent's log as kubectl logs shows it: every
// line is klog text, the plugin's own lines among them, attributed to it.
func checkOneLogFormat(t testing.TB, c *cluster) {
	t.Helper()
	log, err := c.agentLog(c.agentPod(), false)
	if err != nil {
		t.Fatal(err)
	}
	pluginLines := 0
	for _, l := range strings.Split(strings.TrimRight(log, "\n"), "\n") {
		if !klogLine.MatchString(l) {
			t.Errorf("agent log line not in klog format: %q", l)
		}
		if strings.Contains(l, `plugin="gpu"`) && strings.Contains(l, `level="info"`) {
			pluginLines++
		}
	}
	if pluginLines == 0 {
		t.Errorf("no line of the gpu plugin, attributed to it, in the agent's log:\n%s", tailLines(log, 20))
	}
}
