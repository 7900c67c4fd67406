package node_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Issue 40: the gpu example's partitioned GPU (a counter set, the whole
// GPU and two partitions consuming it) on an API server that takes no
// partitionable devices with its default gates: 1.34 does not take shared
// counters in slices of their own, 1.35 has DRAPartitionableDevices off
// and would store the slices without them — the whole GPU and its
// partitions three independent devices to the scheduler. The agent knows
// it from the server's version before its first write, says so, and
// publishes the whole GPU alone, without counters
// (dranode_counter_devices_withdrawn counts the two partitions); a claim
// on it runs. 1.36 and later take partitionable devices by default:
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
	line := c.waitAgentLogLine("the partitions withdrawn for the API server's version",
		fmt.Sprintf("Kubernetes 1.%d, whose partitionable devices", m.apiServer), "a whole GPU, not its partitions")
	t.Logf("agent: %s", line)
	var last string
	eventually(c, "the whole GPU published alone, without counters", func() (struct{}, bool) {
		list, err := c.client.ResourceV1().ResourceSlices().List(c.ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + driverName})
		if err != nil {
			last = err.Error()
			return struct{}{}, false
		}
		var devices []string
		counters := 0
		for _, s := range list.Items {
			counters += len(s.Spec.SharedCounters)
			for _, d := range s.Spec.Devices {
				devices = append(devices, d.Name)
				counters += len(d.ConsumesCounters)
			}
		}
		slices.Sort(devices)
		last = fmt.Sprintf("devices %q, %d counter sets and consumptions", devices, counters)
		return struct{}{}, counters == 0 && slices.Equal(devices, []string{"gpu-0", partitionedGPU})
	}, func() string { return last })
	if got := c.metric(fmt.Sprintf("dranode_counter_devices_withdrawn{driver=%q}", driverName)); got != 2 {
		t.Errorf("dranode_counter_devices_withdrawn = %v, want the 2 partitions", got)
	}
	claim := c.claimOnDevice("default", "whole-gpu", resourcev1.DeviceRequestAllocationResult{Driver: driverName, Pool: c.node.Name(), Device: partitionedGPU})
	if _, err := c.client.ResourceV1().ResourceClaims(claim.Namespace).Create(c.ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := c.claimPod("gpu-whole", claim)
	c.createPod(p)
	p = c.waitRunning(p.Namespace, p.Name)
	got, err := c.client.ResourceV1().ResourceClaims(claim.Namespace).Get(c.ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, spec := c.specFor(got)
	checkContainerSawSpec(t, c.report(p.Namespace, p.Name), spec)
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
