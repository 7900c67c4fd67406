package sliceclient

import (
	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/inventory/inventorytest"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

// BenchmarkNoopSync is the CPU of a sync with nothing to write for a
// 1000-device pool: a new copy of the same inventory is prepared (as Update
// does) and planned against the stored slices.
func BenchmarkNoopSync(b *testing.B) {
	pool := inventory.Pool{Name: "pool", Devices: inventorytest.Devices("dev-", 1000)}
	pl := &planner{driver: testDriver, node: testNode, owner: testOwner}
	srv := newMemServer()
	if err := srv.apply(pl.plan(pool.Name, newDesiredPool(pool), nil, nil)); err != nil {
		b.Fatal(err)
	}
	stored := srv.stored(pool.Name)
	inv := inventory.Inventory{Pools: []inventory.Pool{pool}}
	prev := &Publisher{inventory: map[string]*desiredPool{}}
	prepare(b, prev, inv)
	b.ReportAllocs()
	for b.Loop() {
		p := pl.plan(pool.Name, prepare(b, prev, inv)[pool.Name], stored, nil)
		if !p.empty() {
			b.Fatal("writes planned")
		}
	}
}

// BenchmarkNoopSyncEvent is a sync triggered by a watch event with the
// inventory unchanged: the planning step alone.
func BenchmarkNoopSyncEvent(b *testing.B) {
	pool := inventory.Pool{Name: "pool", Devices: inventorytest.Devices("dev-", 1000)}
	pl := &planner{driver: testDriver, node: testNode, owner: testOwner}
	srv := newMemServer()
	dp := newDesiredPool(pool)
	if err := srv.apply(pl.plan(pool.Name, dp, nil, nil)); err != nil {
		b.Fatal(err)
	}
	stored := srv.stored(pool.Name)
	b.ReportAllocs()
	for b.Loop() {
		if p := pl.plan(pool.Name, dp, stored, nil); !p.empty() {
			b.Fatal("writes planned")
		}
	}
}

// prepare runs Update's validation and encoding, without a queue.
func prepare(b *testing.B, p *Publisher, inv inventory.Inventory) map[string]*desiredPool {
	if _, err := p.prepare(inv); err != nil {
		b.Fatal(err)
	}
	return p.inventory
}

// BenchmarkFirstPublish is a new publisher's CPU before its first write for
// a 64-device pool with a version attribute and a domain-qualified name (what
// each publisher of the 100-node start-up does): Update's validation and
// encoding, then the plan of the creates.
func BenchmarkFirstPublish(b *testing.B) {
	devices := inventorytest.Devices("dev-", 64)
	for i := range devices {
		devices[i].Attributes["gpu.example.com/pcie"] = resourceapi.DeviceAttribute{VersionValue: ptrTo("5.0.0")}
	}
	inv := inventory.Inventory{Pools: []inventory.Pool{{Name: "pool", Devices: devices}}}
	pl := &planner{driver: testDriver, node: testNode, owner: testOwner}
	b.ReportAllocs()
	for b.Loop() {
		p := &Publisher{inventory: map[string]*desiredPool{}}
		dp := prepare(b, p, inv)["pool"]
		if plan := pl.plan("pool", dp, nil, nil); len(plan.creates) != 1 {
			b.Fatalf("%d creates planned, want 1", len(plan.creates))
		}
	}
}
