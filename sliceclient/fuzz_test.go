package sliceclient

import (
	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/inventory/inventorytest"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzSliceName: for any valid node, driver and pool name the slice name is
// a DNS subdomain, and parsing it back yields the index and no other pool.
func FuzzSliceName(f *testing.F) {
	f.Add("node-1", "gpu.example.com", "pool", 3)
	f.Add("a", "b.c", "x/y/z", 0)
	f.Fuzz(func(t *testing.T, node, driver, pool string, index int) {
		if index < 0 || index > 1<<20 {
			return
		}
		if inventory.Validate(inventory.Inventory{Pools: []inventory.Pool{{Name: pool}}}) != nil ||
			inventory.ValidateDriverName(driver) != nil || checkNodeName(node) != nil {
			return
		}
		name := SliceName(node, driver, pool, index)
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			t.Fatalf("SliceName(%q, %q, %q, %d) = %q: %v", node, driver, pool, index, name, msgs)
		}
		if got, ok := sliceIndex(node, driver, pool, name); !ok || got != index {
			t.Fatalf("sliceIndex(%q) = %d, %v", name, got, ok)
		}
	})
}

// FuzzValidateThenPlan: whatever validation accepts, the planner splits into
// slices within the limits with every device exactly once.
func FuzzValidateThenPlan(f *testing.F) {
	f.Add("dev", 130, true)
	f.Add("x", 1, false)
	f.Fuzz(func(t *testing.T, prefix string, n int, taint bool) {
		if n < 0 || n > 2000 {
			return
		}
		devs := inventorytest.Devices(prefix, n)
		if taint && n > 0 {
			for i := 0; i < n; i += 3 {
				devs[i].Taints = []resourceapi.DeviceTaint{{Key: "example.com/t", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
			}
		}
		pool := inventory.Pool{Name: "p", Devices: devs}
		if inventory.Validate(inventory.Inventory{Pools: []inventory.Pool{pool}}) != nil {
			return
		}
		pl := &planner{driver: testDriver, node: testNode, owner: testOwner}
		srv := newMemServer()
		if err := srv.apply(pl.plan("p", newDesiredPool(pool), nil, nil)); err != nil {
			t.Fatal(err)
		}
		checkPool(t, "fuzz", srv, pool, len(srv.slices))
	})
}
