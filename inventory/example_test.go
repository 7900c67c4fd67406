package inventory_test

import (
	"errors"
	"fmt"

	"github.com/dranode/dranode/inventory"
	resourceapi "k8s.io/api/resource/v1"
)

// An inventory is checked as a whole before anything is published, and
// every problem is named with its field path.
func ExampleValidate() {
	model := "a100"
	inv := inventory.Inventory{Pools: []inventory.Pool{{
		Name: "node-1",
		Devices: []resourceapi.Device{
			{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: &model}}},
			{Name: "GPU_1", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {}}},
		},
	}}}
	err := inventory.Validate(inv)
	fmt.Println(errors.Is(err, inventory.ErrInvalid))
	var verr *inventory.ValidationError
	if errors.As(err, &verr) {
		for _, p := range verr.Problems {
			fmt.Println(p.Field)
		}
	}
	fmt.Println(inventory.ValidateDriverName("gpu.example.com"))
	// Output:
	// true
	// pools[0].devices[1].name
	// pools[0].devices[1].attributes["model"]
	// <nil>
}

// A driver keeps its own inventory and, on every change of it or of its
// devices' health, publishes that inventory with the unhealthy devices
// tainted: a device that recovers loses the taint because it is not added
// again.
func ExampleApplyHealthTaints() {
	own := inventory.Inventory{Pools: []inventory.Pool{{
		Name:    "node-1",
		Devices: []resourceapi.Device{{Name: "gpu-0"}, {Name: "gpu-1"}},
	}}}
	taint, err := inventory.HealthTaint("gpu.example.com", resourceapi.DeviceTaintEffectNoSchedule)
	if err != nil {
		panic(err)
	}
	unhealthy := map[inventory.DeviceID]bool{{Pool: "node-1", Device: "gpu-0"}: true}
	published, n := inventory.ApplyHealthTaints(own, unhealthy, taint)
	fmt.Println(n, published.Pools[0].Devices[0].Taints[0].Key, published.Pools[0].Devices[0].Taints[0].Effect)

	unhealthy[inventory.DeviceID{Pool: "node-1", Device: "gpu-0"}] = false // recovered
	published, n = inventory.ApplyHealthTaints(own, unhealthy, taint)
	fmt.Println(n, len(published.Pools[0].Devices[0].Taints))
	// Output:
	// 1 gpu.example.com/unhealthy NoSchedule
	// 0 0
}
