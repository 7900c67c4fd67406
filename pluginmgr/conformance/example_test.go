package conformance_test

import (
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr/conformance"
)

// ValidateInventory reports what the API server would reject, naming the
// pool and device.
func ExampleValidateInventory() {
	inv := inventory.Inventory{Pools: []inventory.Pool{{
		Name: "node-1",
		Devices: []resourcev1.Device{
			{Name: "gpu-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"model": {StringValue: ptr.To("X1")},
			}},
			{Name: "gpu-1", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"model": {StringValue: ptr.To("X1"), IntValue: ptr.To(int64(1))},
			}},
		},
	}}}
	for _, problem := range conformance.ValidateInventory(inv) {
		fmt.Println(problem)
	}
	// Output:
	// pool "node-1": device "gpu-1": attribute "model": exactly one of int, bool, string or version must be set, found 2
}
