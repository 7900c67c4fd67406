package agent_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dranode/dranode/agent"
	"github.com/dranode/dranode/tools/envtest"
)

// Issue 40: an API server that stores slices without shared counters
// (DRAPartitionableDevices off: the default of 1.35, and here the 1.37
// server and scheduler with the gate turned off) would publish the gpu
// example's partitioned GPU and its two partitions as three independent
// devices. The agent learns it before its first write, from a dry-run
// create of a counter set, and publishes the whole GPU alone, without
// counters: no counter set, no partition, no consumption in the stored
// slices, and dranode_counter_devices_withdrawn counts the two
// partitions. The writes: one create (the devices' slice; the counters'
// is never written), and nothing after.
func TestCounterDevicesWithdrawnWithoutCounters(t *testing.T) {
	gates := []string{"--feature-gates=DRAPartitionableDevices=false"}
	env := &envtest.Environment{Scheduler: true, Audit: true, APIServerFlags: gates, SchedulerFlags: gates}
	restCfg, client, ctx, cfg, _ := twoGPUs(t, env)
	cfg.Plugins.Drivers[0].Config["partitionedGPUs"] = 1
	reg := prometheus.NewRegistry()
	start(t, cfg, agent.Options{RESTConfig: restCfg, Registry: reg})
	waitSliceTaints(t, ctx, client, "the whole GPU without its partitions", map[string]string{"gpu-0": "", "gpu-1": "", "partitioned-gpu-0": ""})
	var sets, consuming int
	err := poll(ctx, func() (bool, error) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
		if err != nil {
			return false, err
		}
		sets, consuming = 0, 0
		for _, s := range list.Items {
			sets += len(s.Spec.SharedCounters)
			for _, d := range s.Spec.Devices {
				consuming += len(d.ConsumesCounters)
			}
		}
		return sets == 0, nil
	})
	if err != nil || consuming != 0 {
		t.Fatalf("stored slices: %d counter sets (want 0: the counters' slice deleted), %d counter consumptions (want 0): %v", sets, consuming, err)
	}
	if n := driverGauge(t, reg, "dranode_counter_devices_withdrawn", gpuDriver); n != 2 {
		t.Errorf("dranode_counter_devices_withdrawn = %v, want the 2 partitions", n)
	}
	// One more event the publisher answers (a claim prepared and its pod
	// running would not touch slices): the GPU's allocation by the
	// scheduler, which sees only the whole GPU.
	createPodWithClaim(t, ctx, client, "first")
	t.Logf("claim first got %s", waitAllocated(t, ctx, client, "first"))
	if got, want := fmt.Sprint(sliceWrites(t, env)), fmt.Sprint(map[string]int{"create": 1}); got != want {
		t.Errorf("slice writes %s, want %s (the devices' slice, already without counters)", got, want)
	}
}
