package driver_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/dranode/dranode/examples/piecemeal-driver/driver"
)

// What the helper calls when the kubelet prepares and unprepares a pod's
// claim, without the helper: the record and the CDI spec are real files.
func Example() {
	root, _ := os.MkdirTemp("", "piecemeal-example")
	defer os.RemoveAll(root)
	d, err := driver.New(context.Background(), driver.Config{
		DriverName: "piecemeal.example.com", NodeName: "node-a", NumDevices: 2,
		DevRoot: filepath.Join(root, "dev"), CDIDir: filepath.Join(root, "cdi"),
		StateDir: filepath.Join(root, "state"), BootID: "boot-1",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-gpu", UID: "4a1f"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "gpu", Driver: "piecemeal.example.com", Pool: "node-a", Device: "gpu-1"},
			}},
		}},
	}
	prepared, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("CDI IDs:", prepared["4a1f"].Devices[0].CDIDeviceIDs)
	specs, _ := filepath.Glob(filepath.Join(root, "cdi", "*.json"))
	fmt.Println("spec:", filepath.Base(specs[0]))

	// Unprepare gets only the claim's name and UID; the record has the rest.
	gone := kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "ml", Name: "train-gpu"}, UID: "4a1f"}
	errs, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{gone})
	if err != nil {
		log.Fatal(err)
	}
	specs, _ = filepath.Glob(filepath.Join(root, "cdi", "*.json"))
	fmt.Println("unprepare error:", errs["4a1f"], "specs left:", len(specs))
	// Output:
	// CDI IDs: [piecemeal.example.com/claim=4a1f-gpu-1]
	// spec: piecemeal.example.com-claim_4a1f.json
	// unprepare error: <nil> specs left: 0
}
