package node_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Issue 40: the gpu example's partitioned GPU (shared counters) on an API
// server that does not take partitionable devices as the agent sends
// them, with its default gates:
//
//   - 1.34 refuses shared counters in slices of their own: the agent does
//     not send the inventory, and its log names the field and both
//     versions; no slice of the driver is written (the driver's other
//     devices wait with it: a partial inventory would delete devices the
//     scheduler may already have allocated);
//   - 1.35 stores the slices without the counters (DRAPartitionableDevices
//     is alpha and off): the agent reports the dropped fields once and
//     writes nothing more. The scheduler then sees the whole GPU and its
//     partitions as independent devices and may give both to two claims;
//     the agent refuses the second prepare on the node (the devices share
//     the GPU's counters in the plugin's inventory), the pod's events name
//     the device and the claim holding it, and the pod starts once that
//     claim is unprepared.
//
// 1.36 and later have partitionable devices on by default:
// TestSamplePodSeesItsDevices runs them there.
func TestPartitionsOnAnOlderServer(t *testing.T) {
	m := testMinors(t)
	if m.apiServer >= 36 {
		t.Skipf("the API server is 1.%d, which takes partitionable devices (TestSamplePodSeesItsDevices)", m.apiServer)
	}
	c := startCluster(t, map[string]any{"drivers": map[string]any{"gpu": map[string]any{
		"sha256": testImages.pluginSHA256["gpu"],
		"config": map[string]any{"numDevices": 1, "partitionedGPUs": 1},
	}}})
	if m.apiServer < 35 {
		line := c.waitAgentLogLine("the inventory refused for the API server's version", "Inventory not published", "sharedCounters", "1.35", "1.34")
		t.Logf("agent: %s", line)
		list, err := c.client.ResourceV1().ResourceSlices().List(c.ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + driverName})
		if err != nil || len(list.Items) != 0 {
			t.Fatalf("slices of %s on a 1.34 API server: %d (%v), want none: the inventory was refused", driverName, len(list.Items), err)
		}
		return
	}

	line := c.waitAgentLogLine("the dropped fields reported", "stored it without some fields")
	t.Logf("agent: %s", line)
	whole, err := c.deviceInSlices(resourcev1.DeviceRequestAllocationResult{Driver: driverName, Pool: c.node.Name(), Device: partitionedGPU})
	if err != nil || whole == nil {
		t.Fatalf("%s not in the slices (%v)", partitionedGPU, err)
	}
	if len(whole.ConsumesCounters) != 0 {
		t.Fatalf("the 1.%d API server stored %s with its counters %+v: it takes partitionable devices, update this test", m.apiServer, partitionedGPU, whole.ConsumesCounters)
	}
	if got := strings.Count(c.agentLogNow(), "stored it without some fields"); got != 2 {
		// One per slice: the devices' and the counters' (stored empty).
		t.Errorf("the dropped fields reported %d times, want once per slice (2)", got)
	}

	first := c.claimOnDevice("default", "whole-gpu", resourcev1.DeviceRequestAllocationResult{Driver: driverName, Pool: c.node.Name(), Device: partitionedGPU})
	second := c.claimOnDevice("default", "partition-0", resourcev1.DeviceRequestAllocationResult{Driver: driverName, Pool: c.node.Name(), Device: partitionedGPU + "-part-0"})
	for _, claim := range []*resourcev1.ResourceClaim{first, second} {
		if _, err := c.client.ResourceV1().ResourceClaims(claim.Namespace).Create(c.ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	holder := c.claimPod("gpu-whole", first)
	c.createPod(holder)
	holder = c.waitRunning(holder.Namespace, holder.Name)
	next := c.claimPod("gpu-partition", second)
	c.createPod(next)
	event := c.waitRefusal(next, partitionedGPU, first.Name)
	t.Logf("pod %s refused: %s", next.Name, event)
	c.deletePod(holder.Namespace, holder.Name)
	c.waitPodGone(holder.Namespace, holder.Name)
	c.waitRunning(next.Namespace, next.Name)
	if got := c.metric(fmt.Sprintf("dranode_prepare_refused_total{driver=%q,reason=\"device_in_use\"}", driverName)); got < 1 {
		t.Errorf("dranode_prepare_refused_total: %v, want the refusals the pod's events showed", got)
	}
}

// waitAgentLogLine waits for a line of the agent's log that holds every
// one of parts, and returns it.
func (c *cluster) waitAgentLogLine(what string, parts ...string) string {
	c.t.Helper()
	var last string
	return eventually(c, what+" in the agent's log", func() (string, bool) {
		log := c.agentLogNow()
		for _, line := range strings.Split(log, "\n") {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok {
				return line, true
			}
		}
		last = tailLines(log, 5)
		return "", false
	}, func() string { return last })
}

// agentLogNow is the current agent pod's log so far ("" while unreadable).
func (c *cluster) agentLogNow() string {
	p := c.agentPod()
	if p == nil {
		return ""
	}
	log, _ := c.agentLog(p, false)
	return log
}

// waitRefusal waits for a warning event of pod p naming device and the
// claim holding it (the agent's refusal, as the kubelet reports it), and
// returns the event's reason and message.
func (c *cluster) waitRefusal(p *corev1.Pod, device, holder string) string {
	c.t.Helper()
	var events []string
	return eventually(c, "pod "+p.Name+" refused while "+holder+" holds "+device, func() (string, bool) {
		list, err := c.client.CoreV1().Events(p.Namespace).List(c.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
		if err != nil {
			return "", false
		}
		events = events[:0]
		for _, e := range list.Items {
			events = append(events, e.Reason+": "+e.Message)
			if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, device) && strings.Contains(e.Message, holder) {
				return e.Reason + ": " + e.Message, true
			}
		}
		return "", false
	}, func() string { return fmt.Sprintf("events %q", events) })
}
