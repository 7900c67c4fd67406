package inventory

import (
	"context"
	"fmt"
	"testing"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/inventory/inventorytest"
	"github.com/dranode/dranode/sliceclient"
	"github.com/dranode/dranode/tools/envtest"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	driver = "gpu.example.com"
	node   = "validation"
)

// slicesOf builds the slices of a pool without any validation, to ask the
// server about an inventory that Validate rejects: the counter sets in a
// slice of their own (the API forbids mixing them with devices), the
// devices in another.
func slicesOf(pool inventory.Pool) []*resourceapi.ResourceSlice {
	var specs []resourceapi.ResourceSliceSpec
	if len(pool.SharedCounters) > 0 {
		specs = append(specs, resourceapi.ResourceSliceSpec{SharedCounters: pool.SharedCounters})
	}
	specs = append(specs, resourceapi.ResourceSliceSpec{Devices: pool.Devices})
	out := make([]*resourceapi.ResourceSlice, len(specs))
	for i, spec := range specs {
		nodeName := node
		spec.Driver, spec.NodeName = driver, &nodeName
		spec.Pool = resourceapi.ResourcePool{Name: pool.Name, Generation: 1, ResourceSliceCount: int64(len(specs))}
		out[i] = &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("validation-%d", i)}, Spec: spec}
	}
	return out
}

// TestValidationAgreesWithServer: whatever inventory.Validate accepts, the
// API server accepts (server-side dry run of the slices a publisher would
// create), and the server rejects what Validate rejects for the rules both
// check.
func TestValidationAgreesWithServer(t *testing.T) {
	cfg := envtest.StartT(t, &envtest.Environment{})
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range inventorytest.Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			ours := inventory.Validate(tc.Inventory())
			if (ours == nil) != tc.Valid {
				t.Fatalf("Validate = %v, want valid=%v", ours, tc.Valid)
			}
			var slices []*resourceapi.ResourceSlice
			if ours == nil {
				// Exactly what would be published.
				slices, err = sliceclient.DryRun{DriverName: driver, NodeName: node}.Slices(tc.Inventory())
				if err != nil {
					t.Fatalf("Validate accepts, DryRun refuses: %v", err)
				}
			} else {
				slices = slicesOf(tc.Pool)
			}
			var serverErr error
			for _, s := range slices {
				if _, err := c.ResourceV1().ResourceSlices().Create(context.Background(), s, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
					serverErr = err
				}
			}
			switch {
			case ours == nil && serverErr != nil:
				t.Fatalf("Validate accepts, the server rejects: %v", serverErr)
			case ours != nil && tc.ServerRejects && serverErr == nil:
				t.Fatalf("Validate rejects (%v), the server accepts", ours)
			}
		})
	}
}
