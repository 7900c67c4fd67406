package agent

import (
	"context"
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dranode/dranode/sliceclient"
)

// probePool is the pool of the probe slices: never stored, so never seen
// by a scheduler or a watch.
const probePool = "dranode-field-probe"

// dryRunCreate sends slice as a dry-run create: the API server admits,
// defaults, drops what its feature gates turn off and validates it as a
// real create would, and stores nothing. What came back beside what was
// sent is a DroppedFieldsError to ask what the server dropped.
func (c *apiClient) dryRunCreate(ctx context.Context, slice *resourcev1.ResourceSlice) (*sliceclient.DroppedFieldsError, error) {
	saved, err := c.slices.ResourceSlices.Create(ctx, slice, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return nil, fmt.Errorf("dry-run create of a probe ResourceSlice: %w", err)
	}
	return &sliceclient.DroppedFieldsError{SliceName: saved.Name, Sent: slice, Saved: saved}, nil
}

// taintProbe is a slice of node and driver with one device tainted as the
// agent taints unhealthy devices.
func taintProbe(node, driver string, taint resourcev1.DeviceTaint) *resourcev1.ResourceSlice {
	s := probeSlice(node, driver)
	s.Spec.Devices = []resourcev1.Device{{Name: "probe", Taints: []resourcev1.DeviceTaint{taint}}}
	return s
}

// counterProbe is a slice of node and driver with one shared counter set,
// in a slice of its own as the publisher writes them.
func counterProbe(node, driver string) *resourcev1.ResourceSlice {
	s := probeSlice(node, driver)
	s.Spec.SharedCounters = []resourcev1.CounterSet{{Name: "probe", Counters: map[string]resourcev1.Counter{"probe": {Value: resource.MustParse("1")}}}}
	return s
}

func probeSlice(node, driver string) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "dranode-probe-"},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   driver,
			NodeName: &node,
			Pool:     resourcev1.ResourcePool{Name: probePool, ResourceSliceCount: 1},
		},
	}
}

// probeServer learns, once per agent, whether the API server keeps device
// taints and shared counters where its minor has them on by default (1.36
// and later; before, the minor alone decides, learnServer): a gate turned
// off by hand would otherwise show only once the first real write came
// back without them, and until then a tainted (unhealthy) device would be
// allocatable and a GPU and its partitions independent devices. Two
// dry-run creates, stored nowhere; a probe that fails is logged and
// changes nothing (the first real write still tells).
func (a *Agent) probeServer(ctx context.Context, driver string, taint resourcev1.DeviceTaint) {
	a.client.probeOnce.Do(func() {
		m := int(a.client.minor.Load())
		probes := []struct {
			skip    bool
			slice   *resourcev1.ResourceSlice
			dropped func(*sliceclient.DroppedFieldsError) bool
			adapt   func(string)
			what    string
		}{
			{taintsOffByDefault(m), taintProbe(a.cfg.NodeName, driver, taint), (*sliceclient.DroppedFieldsError).TaintsDropped, a.withdrawUnhealthy,
				"The API server drops device taints from the ResourceSlices it stores (a dry-run create kept none: is the DRADeviceTaints feature gate off?)"},
			{countersOffByDefault(m), counterProbe(a.cfg.NodeName, driver), (*sliceclient.DroppedFieldsError).CountersDropped, a.withdrawCounterDevices,
				"The API server drops shared counters from the ResourceSlices it stores (a dry-run create kept none: is the DRAPartitionableDevices feature gate off?)"},
		}
		for _, p := range probes {
			if p.skip {
				continue
			}
			res, err := a.client.dryRunCreate(ctx, p.slice)
			if err != nil {
				a.log.Error(err, "Probing what the API server keeps of a ResourceSlice: the first real write will tell")
				continue
			}
			if p.dropped(res) {
				p.adapt(p.what)
			}
		}
	})
}
