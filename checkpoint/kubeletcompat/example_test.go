package kubeletcompat_test

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/dranode/dranode/checkpoint"
	"github.com/dranode/dranode/checkpoint/kubeletcompat"
)

// Reading the DRA manager's checkpoint from a kubelet's state directory.
func ExampleReadDRAManagerState() {
	kubeletDir := filepath.Join("testdata", kubeletcompat.DRAManagerStateFile) // /var/lib/kubelet on a node
	state, err := kubeletcompat.ReadDRAManagerState(filepath.Join(kubeletDir, "one-claim"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fmt.Println("the kubelet has not prepared any claim yet")
	case errors.Is(err, checkpoint.ErrCorrupt):
		fmt.Println("damaged:", err)
	case errors.Is(err, kubeletcompat.ErrUnknownFormat):
		fmt.Println("a kubelet this package does not know:", err)
	case err != nil:
		fmt.Println(err)
	}
	for _, claim := range state.Claims {
		fmt.Printf("%s/%s used by %d pod(s)\n", claim.Namespace, claim.Name, len(claim.PodUIDs))
		for driver, ds := range claim.Drivers {
			for _, d := range ds.Devices {
				fmt.Printf("  %s %s/%s as %v\n", driver, d.PoolName, d.DeviceName, d.CDIDeviceIDs)
			}
		}
	}
	// Output:
	// default/gpu-claim used by 1 pod(s)
	//   gpu.example.com node-a/gpu-0 as [example.com/gpu=claim-0b7c3d2e-gpu-0]
}

// Reading a device manager checkpoint written before Kubernetes 1.20, the
// layout the kubelet itself once failed to read after an upgrade.
func ExampleReadDeviceManagerCheckpoint() {
	path := filepath.Join("testdata", kubeletcompat.DeviceManagerCheckpointFile, "pre-1.20-several")
	cp, err := kubeletcompat.ReadDeviceManagerCheckpoint(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("layout:", cp.Format)
	for _, e := range cp.Entries[:2] {
		fmt.Printf("pod %s container %s: %s %v\n", e.PodUID[:8], e.ContainerName, e.ResourceName, e.DeviceIDs())
	}
	// Output:
	// layout: device-list (pre-1.20)
	// pod d0000000 container trainer: example.com/gpu [gpu-0 gpu-1 gpu-4]
	// pod d0000000 container trainer: example.com/nic [nic-vf-2]
}
