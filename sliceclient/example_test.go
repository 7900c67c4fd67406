package sliceclient_test

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/sliceclient"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func gpus(n int) []resourceapi.Device {
	devs := make([]resourceapi.Device, n)
	for i := range devs {
		model := "a100"
		devs[i] = resourceapi.Device{
			Name:       "gpu-" + strconv.Itoa(i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: &model}},
		}
	}
	return devs
}

// A dry run shows how an inventory is split: 300 devices need three slices
// of at most 128, spread evenly so that each has room to grow.
func ExampleDryRun_Slices() {
	dry := sliceclient.DryRun{DriverName: "gpu.example.com", NodeName: "node-1"}
	slices, err := dry.Slices(inventory.Inventory{Pools: []inventory.Pool{
		{Name: "node-1", Devices: gpus(300)},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range slices {
		fmt.Println(s.Name, len(s.Spec.Devices), s.Spec.Pool.Generation, s.Spec.Pool.ResourceSliceCount)
	}
	// Output:
	// node-1-gpu.example.com-node-1-233ee2c2-0 100 1 3
	// node-1-gpu.example.com-node-1-233ee2c2-1 100 1 3
	// node-1-gpu.example.com-node-1-233ee2c2-2 100 1 3
}

// The publisher takes an inventory.Inventory; one that inventory.Validate
// rejects is refused as a whole with that error, every problem named, and
// the publisher keeps what it had.
func ExamplePublisher_Update() {
	cs := fake.NewClientset()
	p, err := sliceclient.New(sliceclient.Options{
		Client:     sliceclient.Client{ResourceSlices: cs.ResourceV1().ResourceSlices(), Nodes: cs.CoreV1().Nodes()},
		DriverName: "gpu.example.com", NodeName: "node-1", NodeUID: "uid-1",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	devs := gpus(2)
	devs[1].Name = "GPU_1"
	err = p.Update(inventory.Inventory{Pools: []inventory.Pool{{Name: "node-1", Devices: devs}}})
	fmt.Println(errors.Is(err, inventory.ErrInvalid))
	fmt.Println(err)
	// Output:
	// true
	// invalid inventory: 1 problem(s): pools[0].devices[1].name: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')
}

// Publishers of many nodes in one process share a Watcher; a bound on their
// writes in flight is one of its options, checked when it is made.
func ExampleMaxWritesInFlight() {
	cs := fake.NewClientset()
	client := sliceclient.Client{ResourceSlices: cs.ResourceV1().ResourceSlices(), Nodes: cs.CoreV1().Nodes()}
	if _, err := sliceclient.NewWatcher(client, "gpu.example.com", sliceclient.MaxWritesInFlight(-1)); err != nil {
		fmt.Println(err)
	}
	w, err := sliceclient.NewWatcher(client, "gpu.example.com", sliceclient.MaxWritesInFlight(8))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Stop()
	p, err := sliceclient.New(sliceclient.Options{
		Client: client, DriverName: "gpu.example.com", NodeName: "node-7", NodeUID: "uid-7", Watcher: w,
	})
	fmt.Println(p != nil, err)
	// Output:
	// invalid publisher options: MaxWritesInFlight(-1) is negative
	// true <nil>
}
