package main

import (
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/dranode/dranode/pluginmgr"
)

// What gpu-plugin answers the agent for a claim with GPU 1 and a
// time-slicing configuration: the container edits that inject the device.
func Example() {
	cfg, err := parseConfig([]byte(`{"driverName": "gpu.example.com", "numDevices": 2}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	claim := pluginmgr.Claim{
		Namespace: "ml", Name: "train",
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: "gpu.example.com", Pool: "node-a", Device: "gpu-1"}},
		Configs: []resourcev1.DeviceAllocationConfiguration{{
			Source: resourcev1.AllocationConfigSourceClaim,
			DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
				Driver:     "gpu.example.com",
				Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion": "gpu.example.com/v1", "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}}`)},
			}},
		}},
	}
	devices, err := prepareClaim(cfg, claim)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range devices {
		fmt.Println(d.Pool, d.Device, d.Requests)
		for _, n := range d.Edits.DeviceNodes {
			fmt.Println(" ", n.HostPath, "->", n.Path)
		}
		for _, e := range d.Edits.Env {
			fmt.Println(" ", e)
		}
	}
	// Output:
	// node-a gpu-1 [gpu]
	//   /dev/null -> /dev/gpu1
	//   GPU_DEVICE_GPU_EXAMPLE_COM_1=GPU-4d73f124-010f-8862-0092-bbc6c13f5aea
	//   GPU_DEVICE_GPU_EXAMPLE_COM_1_SHARING_STRATEGY=TimeSlicing
	//   GPU_DEVICE_GPU_EXAMPLE_COM_1_TIMESLICE_INTERVAL=Default
}
