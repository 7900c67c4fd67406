package sliceclient

import (
	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/inventory/inventorytest"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

type step struct {
	name                               string
	change                             func(p *inventory.Pool)
	wipe                               bool // delete every stored slice first, like the kubelet
	creates, updates, deletes, nSlices int
	bump                               bool
}

func TestPlanMinimalWrites(t *testing.T) {
	pool := inventory.Pool{Name: "pool-a", Devices: inventorytest.Devices("dev-", 1000)}
	steps := []step{
		{name: "initial publish", creates: 8, nSlices: 8, bump: true},
		{name: "restart unchanged", nSlices: 8},
		{name: "one attribute", change: func(p *inventory.Pool) { p.Devices[3] = inventorytest.Device("dev-3", "h100") }, updates: 1, nSlices: 8},
		{name: "add one device to a slice with room", change: func(p *inventory.Pool) { p.Devices = append(p.Devices, inventorytest.Device("new-0", "a100")) }, updates: 1, nSlices: 8},
		{name: "remove one device", change: func(p *inventory.Pool) { p.Devices = slices.Delete(p.Devices, 500, 501) }, updates: 1, nSlices: 8},
		{name: "two slices changed", change: func(p *inventory.Pool) {
			p.Devices[0] = inventorytest.Device("dev-0", "h200")
			p.Devices[900] = inventorytest.Device(p.Devices[900].Name, "h200")
		}, updates: 2, nSlices: 8},
		{name: "grow by one slice", change: func(p *inventory.Pool) { p.Devices = append(p.Devices, inventorytest.Devices("grow-", 128)...) }, creates: 1, updates: 8, nSlices: 9, bump: true},
		{name: "shrink by one slice", change: func(p *inventory.Pool) { p.Devices = p.Devices[:len(p.Devices)-128] }, deletes: 1, updates: 8, nSlices: 8, bump: true},
		{name: "kubelet wipe", wipe: true, creates: 8, nSlices: 8, bump: true},
		{name: "steady", nSlices: 8},
	}
	pl := &planner{driver: testDriver, node: testNode, owner: testOwner}
	srv := newMemServer()
	var gen int64
	for _, st := range steps {
		if st.change != nil {
			st.change(&pool)
		}
		if st.wipe {
			clear(srv.slices)
		}
		p := pl.plan(pool.Name, newDesiredPool(pool), srv.stored(pool.Name), nil)
		if len(p.creates) != st.creates || len(p.updates) != st.updates || len(p.deletes) != st.deletes {
			t.Fatalf("%s: got %d creates, %d updates, %d deletes; want %d, %d, %d",
				st.name, len(p.creates), len(p.updates), len(p.deletes), st.creates, st.updates, st.deletes)
		}
		if p.resplit != st.bump {
			t.Errorf("%s: resplit = %v, want %v", st.name, p.resplit, st.bump)
		}
		if err := srv.apply(p); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		checkPool(t, st.name, srv, pool, st.nSlices)
		if st.bump && p.generation <= gen && !st.wipe {
			t.Errorf("%s: generation %d not above %d", st.name, p.generation, gen)
		}
		gen = p.generation
		// Applying the plan converges: planning again writes nothing.
		if again := pl.plan(pool.Name, newDesiredPool(pool), srv.stored(pool.Name), nil); !again.empty() {
			t.Fatalf("%s: second plan not empty: %d/%d/%d", st.name, len(again.creates), len(again.updates), len(again.deletes))
		}
	}
}

// checkPool asserts the stored slices form one consistent pool holding
// exactly the pool's devices, each once, within the per-slice limit.
func checkPool(t *testing.T, step string, srv *memServer, pool inventory.Pool, nSlices int) {
	t.Helper()
	stored := srv.stored(pool.Name)
	if len(stored) != nSlices {
		t.Fatalf("%s: %d slices stored, want %d", step, len(stored), nSlices)
	}
	seen := map[string]bool{}
	for _, s := range stored {
		if s.obj.Spec.Pool.ResourceSliceCount != int64(nSlices) || s.obj.Spec.Pool.Generation != stored[0].obj.Spec.Pool.Generation {
			t.Fatalf("%s: slice %s has pool %+v, inconsistent", step, s.obj.Name, s.obj.Spec.Pool)
		}
		limit := maxDevicesPerSlice
		for i := range s.obj.Spec.Devices {
			if isAdvanced(&s.obj.Spec.Devices[i]) {
				limit = maxAdvancedDevicesPerSlice
			}
		}
		if len(s.obj.Spec.Devices) > limit {
			t.Fatalf("%s: slice %s has %d devices", step, s.obj.Name, len(s.obj.Spec.Devices))
		}
		if *s.obj.Spec.NodeName != testNode || s.obj.Spec.Driver != testDriver || len(s.obj.OwnerReferences) != 1 {
			t.Fatalf("%s: slice %s: wrong node, driver or owner", step, s.obj.Name)
		}
		for _, d := range s.obj.Spec.Devices {
			if seen[d.Name] {
				t.Fatalf("%s: device %s in two slices", step, d.Name)
			}
			seen[d.Name] = true
		}
	}
	if len(seen) != len(pool.Devices) {
		t.Fatalf("%s: %d devices stored, want %d", step, len(seen), len(pool.Devices))
	}
}

func TestPlanLimitsAndCounters(t *testing.T) {
	tainted := inventorytest.Devices("t-", 130)
	for i := range tainted {
		tainted[i].Taints = []resourceapi.DeviceTaint{{Key: "example.com/broken", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	counters := make([]resourceapi.CounterSet, 9)
	for i := range counters {
		counters[i] = resourceapi.CounterSet{Name: "set-" + string(rune('a'+i)), Counters: map[string]resourceapi.Counter{"mem": {}}}
	}
	tests := []struct {
		name          string
		pool          inventory.Pool
		wantSlices    int
		wantMaxPerDev int
	}{
		{"empty pool has one slice", inventory.Pool{Name: "p"}, 1, 0},
		{"128 plain devices fit one slice", inventory.Pool{Name: "p", Devices: inventorytest.Devices("d-", 128)}, 1, 128},
		{"129 plain devices need two", inventory.Pool{Name: "p", Devices: inventorytest.Devices("d-", 129)}, 2, 65},
		{"tainted devices use the 64 limit", inventory.Pool{Name: "p", Devices: tainted}, 3, 44},
		{"counter sets go in slices of 8, first", inventory.Pool{Name: "p", SharedCounters: counters, Devices: inventorytest.Devices("d-", 10)}, 3, 10},
	}
	pl := &planner{driver: testDriver, node: testNode, owner: testOwner}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pl.plan(tt.pool.Name, newDesiredPool(tt.pool), nil, nil)
			if len(p.creates) != tt.wantSlices {
				t.Fatalf("%d slices, want %d", len(p.creates), tt.wantSlices)
			}
			most := 0
			for i, w := range p.creates {
				most = max(most, len(w.obj.Spec.Devices))
				if w.obj.Spec.Devices != nil && w.obj.Spec.SharedCounters != nil {
					t.Errorf("slice %d mixes devices and counters", i)
				}
				if w.obj.Name != SliceName(testNode, testDriver, "p", i) {
					t.Errorf("slice %d named %s", i, w.obj.Name)
				}
			}
			if most != tt.wantMaxPerDev {
				t.Errorf("largest slice has %d devices, want %d", most, tt.wantMaxPerDev)
			}
			if len(tt.pool.SharedCounters) > 0 && len(p.creates[0].obj.Spec.SharedCounters) != 8 {
				t.Errorf("first slice has %d counter sets, want 8", len(p.creates[0].obj.Spec.SharedCounters))
			}
		})
	}
}

func TestPlanDeletesForeignAndRemovedPools(t *testing.T) {
	pl := &planner{driver: testDriver, node: testNode, owner: testOwner}
	srv := newMemServer()
	pool := inventory.Pool{Name: "p", Devices: inventorytest.Devices("d-", 3)}
	if err := srv.apply(pl.plan("p", newDesiredPool(pool), nil, nil)); err != nil {
		t.Fatal(err)
	}
	foreign := &resourceapi.ResourceSlice{}
	foreign.Name = "upstream-style-abcde"
	foreign.ResourceVersion = "1000"
	foreign.Spec.Pool.Name = "p"
	srv.slices[foreign.Name] = foreign
	p := pl.plan("p", newDesiredPool(pool), srv.stored("p"), nil)
	if len(p.deletes) != 1 || p.deletes[0].Name != foreign.Name || len(p.updates)+len(p.creates) != 0 {
		t.Fatalf("foreign slice: plan %+v", p)
	}
	gone := pl.plan("p", nil, srv.stored("p"), nil)
	if len(gone.deletes) != 2 {
		t.Fatalf("removed pool: %d deletes, want 2", len(gone.deletes))
	}
}

// TestStoredAfterWriteMatchesEncoding: the canonical form taken from the
// write for devices returned unchanged is exactly what encoding the
// server's answer gives, and a device the server returned differently is
// encoded from the answer, so a dropped field is still noticed.
func TestStoredAfterWriteMatchesEncoding(t *testing.T) {
	tainted := inventorytest.Device("dev-t", "a100")
	tainted.Taints = []resourceapi.DeviceTaint{{Key: "example.com/broken", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	cases := []struct {
		name        string
		devices     []resourceapi.Device
		serverEdits func(got *resourceapi.ResourceSlice)
		wantEqual   bool // the stored form equals what was sent
	}{
		{name: "simple devices returned as sent", devices: inventorytest.Devices("dev-", 5), wantEqual: true},
		{name: "a tainted device among simple ones", devices: append(inventorytest.Devices("dev-", 3), tainted), wantEqual: true},
		{name: "server dropped an attribute", devices: inventorytest.Devices("dev-", 3), serverEdits: func(got *resourceapi.ResourceSlice) {
			delete(got.Spec.Devices[1].Attributes, "model")
		}},
		{name: "server changed a capacity", devices: inventorytest.Devices("dev-", 3), serverEdits: func(got *resourceapi.ResourceSlice) {
			c := got.Spec.Devices[2].Capacity["memory"]
			c.Value.Add(c.Value)
			got.Spec.Devices[2].Capacity["memory"] = c
		}},
		{name: "server dropped the only non-simple field", devices: func() []resourceapi.Device {
			d := inventorytest.Devices("dev-", 3)
			d[1].AllowMultipleAllocations = ptrTo(true)
			return d
		}(), serverEdits: func(got *resourceapi.ResourceSlice) {
			got.Spec.Devices[1].AllowMultipleAllocations = nil
		}},
		{name: "server added a field", devices: inventorytest.Devices("dev-", 3), serverEdits: func(got *resourceapi.ResourceSlice) {
			got.Spec.Devices[0].AllowMultipleAllocations = ptrTo(true)
		}},
		{name: "server returned one device less", devices: inventorytest.Devices("dev-", 3), serverEdits: func(got *resourceapi.ResourceSlice) {
			got.Spec.Devices = got.Spec.Devices[:2]
		}},
	}
	pl := &planner{driver: testDriver, node: testNode, owner: testOwner}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pool := inventory.Pool{Name: "pool", Devices: tc.devices}
			plan := pl.plan(pool.Name, newDesiredPool(pool), nil, nil)
			if len(plan.creates) != 1 {
				t.Fatalf("%d creates planned, want 1", len(plan.creates))
			}
			w := plan.creates[0]
			got := w.obj.DeepCopy()
			got.ResourceVersion = "7"
			if tc.serverEdits != nil {
				tc.serverEdits(got)
			}
			s := storedAfterWrite(got, &w)
			want := canonicalOf(&got.Spec)
			if !s.canon().equal(&want) {
				t.Fatalf("canonical form after the write differs from encoding the answer")
			}
			if eq := s.canon().equal(&w.canon); eq != tc.wantEqual {
				t.Errorf("stored equals sent: %v, want %v", eq, tc.wantEqual)
			}
		})
	}
}
