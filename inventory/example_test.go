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
