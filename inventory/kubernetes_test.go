package inventory_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dranode/dranode/inventory"
)

func TestValidateForKubernetes(t *testing.T) {
	pool := func(d resourceapi.Device, counters ...resourceapi.CounterSet) inventory.Inventory {
		return inventory.Inventory{Pools: []inventory.Pool{{Name: "p", Devices: []resourceapi.Device{d}, SharedCounters: counters}}}
	}
	none := resourceapi.Device{Name: "d", Taints: []resourceapi.DeviceTaint{{Key: "example.com/k", Effect: resourceapi.DeviceTaintEffectNone}}}
	noSchedule := resourceapi.Device{Name: "d", Taints: []resourceapi.DeviceTaint{{Key: "example.com/k", Effect: resourceapi.DeviceTaintEffectNoSchedule}}}
	list := resourceapi.Device{Name: "d", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"b": {IntValues: []int64{1, 2}}, "a": {StringValue: new("x")}, "c": {StringValues: []string{"x"}},
	}}
	counters := resourceapi.CounterSet{Name: "mem", Counters: map[string]resourceapi.Counter{"bytes": {Value: resource.MustParse("1Gi")}}}
	allocatable := resourceapi.Device{Name: "d", NodeAllocatableResources: map[corev1.ResourceName]resourceapi.NodeAllocatableResource{"cpu": {}}}

	for _, tc := range []struct {
		name  string
		inv   inventory.Inventory
		minor int
		want  []string // the fields named, in order
	}{
		{"None effect on 1.34", pool(none), 34, []string{"pools[0].devices[0].taints[0].effect: taint effect None needs Kubernetes 1.35 or newer; the API server is 1.34"}},
		{"None effect on 1.35", pool(none), 35, nil},
		{"NoSchedule on 1.34", pool(noSchedule), 34, nil},
		{"shared counters on 1.34", pool(resourceapi.Device{Name: "d"}, counters), 34, []string{"pools[0].sharedCounters: shared counters in ResourceSlices of their own needs Kubernetes 1.35 or newer; the API server is 1.34"}},
		{"shared counters on 1.35", pool(resourceapi.Device{Name: "d"}, counters), 35, nil},
		{"list attributes on 1.35", pool(list), 35, []string{
			"pools[0].devices[0].attributes[b]: a list-valued attribute needs Kubernetes 1.36 or newer; the API server is 1.35",
			"pools[0].devices[0].attributes[c]: a list-valued attribute needs Kubernetes 1.36 or newer; the API server is 1.35",
		}},
		{"list attributes on 1.36", pool(list), 36, nil},
		{"nodeAllocatableResources on 1.36", pool(allocatable), 36, []string{"pools[0].devices[0].nodeAllocatableResources: nodeAllocatableResources needs Kubernetes 1.37 or newer; the API server is 1.36"}},
		{"nodeAllocatableResources on 1.37", pool(allocatable), 37, nil},
		{"unknown server version", pool(none), 0, nil},
		{"several on 1.34", pool(none, counters), 34, []string{
			"pools[0].sharedCounters: shared counters in ResourceSlices of their own needs Kubernetes 1.35 or newer; the API server is 1.34",
			"pools[0].devices[0].taints[0].effect: taint effect None needs Kubernetes 1.35 or newer; the API server is 1.34",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := inventory.ValidateForKubernetes(tc.inv, tc.minor)
			var got []string
			if err != nil {
				got = strings.Split(err.Error(), "\n")
				if !errors.Is(err, inventory.ErrNeedsNewerKubernetes) {
					t.Errorf("%v does not match ErrNeedsNewerKubernetes", err)
				}
				var nn *inventory.NeedsNewerKubernetesError
				if !errors.As(err, &nn) || nn.Server != tc.minor {
					t.Errorf("%v: no *NeedsNewerKubernetesError for server 1.%d", err, tc.minor)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWithoutSharedCounters(t *testing.T) {
	mem := func(q string) map[string]resourceapi.Counter {
		return map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(q)}}
	}
	consumes := func(set, q string) []resourceapi.DeviceCounterConsumption {
		return []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: mem(q)}}
	}
	pool := func(devices ...resourceapi.Device) inventory.Pool {
		return inventory.Pool{Name: "node-a", SharedCounters: []resourceapi.CounterSet{{Name: "gpu-0", Counters: mem("40Gi")}}, Devices: devices}
	}
	plain := resourceapi.Device{Name: "plain"}
	whole := resourceapi.Device{Name: "gpu-0", ConsumesCounters: consumes("gpu-0", "40Gi")}
	part0 := resourceapi.Device{Name: "gpu-0-part-0", ConsumesCounters: consumes("gpu-0", "20Gi")}
	part1 := resourceapi.Device{Name: "gpu-0-part-1", ConsumesCounters: consumes("gpu-0", "20Gi")}
	stray := resourceapi.Device{Name: "stray", ConsumesCounters: consumes("no-such-set", "1")}
	for _, tc := range []struct {
		name      string
		in        inventory.Pool
		kept      []string
		withdrawn int
	}{
		{"the whole GPU first: its partitions go", pool(plain, whole, part0, part1), []string{"plain", "gpu-0"}, 2},
		{"partitions first: both fit, the whole GPU goes", pool(part0, part1, whole), []string{"gpu-0-part-0", "gpu-0-part-1"}, 1},
		{"one partition, then the whole GPU: the partition stays", pool(part1, whole), []string{"gpu-0-part-1"}, 1},
		{"a set the pool does not have", pool(stray, plain), []string{"plain"}, 1},
		{"no counters at all", inventory.Pool{Name: "node-a", Devices: []resourceapi.Device{plain}}, []string{"plain"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := inventory.Inventory{Pools: []inventory.Pool{tc.in}}
			before := in.DeepCopy()
			out, n := inventory.WithoutSharedCounters(in)
			if !reflect.DeepEqual(in, before) {
				t.Errorf("the input changed")
			}
			var kept []string
			for _, d := range out.Pools[0].Devices {
				kept = append(kept, d.Name)
				if len(d.ConsumesCounters) != 0 {
					t.Errorf("%s kept with its consumption %v", d.Name, d.ConsumesCounters)
				}
			}
			if !slices.Equal(kept, tc.kept) || n != tc.withdrawn {
				t.Errorf("kept %q, %d left out; want %q, %d", kept, n, tc.kept, tc.withdrawn)
			}
			if len(out.Pools[0].SharedCounters) != 0 {
				t.Errorf("counter sets kept: %v", out.Pools[0].SharedCounters)
			}
			if err := inventory.ValidateForKubernetes(out, 34); err != nil {
				t.Errorf("a 1.34 API server would not take the result: %v", err)
			}
		})
	}
}
