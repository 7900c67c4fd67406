package inventory_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dranode/dranode/inventory"
	resourceapi "k8s.io/api/resource/v1"
)

func healthInventory(taints map[string][]resourceapi.DeviceTaint) inventory.Inventory {
	pool := func(name string, devs ...string) inventory.Pool {
		p := inventory.Pool{Name: name}
		for _, d := range devs {
			p.Devices = append(p.Devices, resourceapi.Device{Name: d, Taints: taints[name+"/"+d]})
		}
		return p
	}
	return inventory.Inventory{Pools: []inventory.Pool{pool("node-1", "gpu-0", "gpu-1"), pool("node-1-b", "gpu-0")}}
}

// taintsOf lists each device's taints as "key=effect", by "pool/device".
func taintsOf(inv inventory.Inventory) map[string][]string {
	out := map[string][]string{}
	for _, p := range inv.Pools {
		for _, d := range p.Devices {
			for _, t := range d.Taints {
				out[p.Name+"/"+d.Name] = append(out[p.Name+"/"+d.Name], t.Key+"="+string(t.Effect))
			}
		}
	}
	return out
}

func TestApplyHealthTaints(t *testing.T) {
	const driver = "gpu.example.com"
	health, err := inventory.HealthTaint(driver, resourceapi.DeviceTaintEffectNoSchedule)
	if err != nil {
		t.Fatal(err)
	}
	own := resourceapi.DeviceTaint{Key: "gpu.example.com/firmware", Value: "old", Effect: resourceapi.DeviceTaintEffectNone}
	ownSameKey := resourceapi.DeviceTaint{Key: health.Key, Effect: resourceapi.DeviceTaintEffectNoExecute}
	full := make([]resourceapi.DeviceTaint, resourceapi.DeviceTaintsMaxLength)
	for i := range full {
		full[i] = resourceapi.DeviceTaint{Key: fmt.Sprintf("example.com/t%d", i), Effect: resourceapi.DeviceTaintEffectNone}
	}
	var fullKeys []string
	for _, t := range full {
		fullKeys = append(fullKeys, t.Key+"="+string(t.Effect))
	}
	id := func(p, d string) inventory.DeviceID { return inventory.DeviceID{Pool: p, Device: d} }
	tests := []struct {
		name        string
		taints      map[string][]resourceapi.DeviceTaint
		unhealthy   map[inventory.DeviceID]bool
		want        map[string][]string
		wantTainted int
	}{
		{name: "all healthy", unhealthy: nil, want: map[string][]string{}},
		{name: "one unhealthy", unhealthy: map[inventory.DeviceID]bool{id("node-1", "gpu-1"): true},
			want: map[string][]string{"node-1/gpu-1": {"gpu.example.com/unhealthy=NoSchedule"}}, wantTainted: 1},
		{name: "same device name in another pool", unhealthy: map[inventory.DeviceID]bool{id("node-1-b", "gpu-0"): true},
			want: map[string][]string{"node-1-b/gpu-0": {"gpu.example.com/unhealthy=NoSchedule"}}, wantTainted: 1},
		{name: "false is healthy", unhealthy: map[inventory.DeviceID]bool{id("node-1", "gpu-1"): false}, want: map[string][]string{}},
		{name: "unknown device ignored", unhealthy: map[inventory.DeviceID]bool{id("node-1", "gpu-9"): true, id("other", "gpu-0"): true},
			want: map[string][]string{}},
		{name: "the driver's own taints are kept",
			taints:    map[string][]resourceapi.DeviceTaint{"node-1/gpu-0": {own}, "node-1/gpu-1": {own}},
			unhealthy: map[inventory.DeviceID]bool{id("node-1", "gpu-0"): true},
			want: map[string][]string{
				"node-1/gpu-0": {"gpu.example.com/firmware=None", "gpu.example.com/unhealthy=NoSchedule"},
				"node-1/gpu-1": {"gpu.example.com/firmware=None"},
			}, wantTainted: 1},
		{name: "the driver's own taint with the key wins",
			taints:    map[string][]resourceapi.DeviceTaint{"node-1/gpu-0": {ownSameKey}},
			unhealthy: map[inventory.DeviceID]bool{id("node-1", "gpu-0"): true, id("node-1", "gpu-1"): true},
			want: map[string][]string{
				"node-1/gpu-0": {"gpu.example.com/unhealthy=NoExecute"},
				"node-1/gpu-1": {"gpu.example.com/unhealthy=NoSchedule"},
			}, wantTainted: 2},
		{name: "healthy device with the driver's own taint with the key keeps it",
			taints:    map[string][]resourceapi.DeviceTaint{"node-1/gpu-0": {ownSameKey}},
			unhealthy: nil,
			want:      map[string][]string{"node-1/gpu-0": {"gpu.example.com/unhealthy=NoExecute"}}, wantTainted: 1},
		{name: "no room for another taint",
			taints:    map[string][]resourceapi.DeviceTaint{"node-1/gpu-0": full},
			unhealthy: map[inventory.DeviceID]bool{id("node-1", "gpu-0"): true},
			want:      map[string][]string{"node-1/gpu-0": fullKeys}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inv := healthInventory(tc.taints)
			before := inv.DeepCopy()
			got, n := inventory.ApplyHealthTaints(inv, tc.unhealthy, health)
			if !reflect.DeepEqual(inv, before) {
				t.Fatalf("the input was modified: %+v", inv)
			}
			if g := taintsOf(got); !reflect.DeepEqual(g, tc.want) {
				t.Errorf("taints = %v, want %v", g, tc.want)
			}
			if n != tc.wantTainted {
				t.Errorf("tainted = %d, want %d", n, tc.wantTainted)
			}
			if err := inventory.Validate(got); err != nil {
				t.Errorf("result does not validate: %v", err)
			}
			again, n2 := inventory.ApplyHealthTaints(got, tc.unhealthy, health)
			if !reflect.DeepEqual(again, got) || n2 != n {
				t.Errorf("applying again changed the result: %v (%d), was %v (%d)", taintsOf(again), n2, taintsOf(got), n)
			}
			// Healthy again: applied to the driver's own inventory, the
			// health taints are gone and only the driver's own remain.
			healed, _ := inventory.ApplyHealthTaints(inv, nil, health)
			if !reflect.DeepEqual(healed, before) {
				t.Errorf("healthy again = %v, want the driver's own %v", taintsOf(healed), taintsOf(before))
			}
		})
	}
}

func TestApplyHealthTaintsSharesNothingItChanges(t *testing.T) {
	health := resourceapi.DeviceTaint{Key: "gpu.example.com/unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	own := make([]resourceapi.DeviceTaint, 1, 4) // spare capacity: an append in place would show in inv
	own[0] = resourceapi.DeviceTaint{Key: "example.com/own", Effect: resourceapi.DeviceTaintEffectNone}
	inv := inventory.Inventory{Pools: []inventory.Pool{{Name: "p", Devices: []resourceapi.Device{{Name: "d", Taints: own}}}}}
	got, _ := inventory.ApplyHealthTaints(inv, map[inventory.DeviceID]bool{{Pool: "p", Device: "d"}: true}, health)
	got.Pools[0].Devices[0].Taints[1].Effect = resourceapi.DeviceTaintEffectNoExecute
	if len(inv.Pools[0].Devices[0].Taints) != 1 || own[:2][1].Key != "" {
		t.Errorf("the input's taints were changed: %+v", own[:2])
	}
}

func TestHealthTaint(t *testing.T) {
	for _, tc := range []struct {
		driver  string
		effect  resourceapi.DeviceTaintEffect
		wantErr string
	}{
		{"gpu.example.com", resourceapi.DeviceTaintEffectNoSchedule, ""},
		{"gpu.example.com", resourceapi.DeviceTaintEffectNoExecute, ""},
		{"gpu.example.com", resourceapi.DeviceTaintEffectNone, ""},
		{"gpu.example.com", "PreferNoSchedule", `device taint effect "PreferNoSchedule": must be NoSchedule, NoExecute or None`},
		{"gpu.example.com", "", `device taint effect "": must be`},
		{"noschedule", "noschedule", `device taint effect "noschedule"`},
		{"GPU_example", resourceapi.DeviceTaintEffectNoSchedule, "GPU_example"},
	} {
		got, err := inventory.HealthTaint(tc.driver, tc.effect)
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("HealthTaint(%q, %q) = %v", tc.driver, tc.effect, err)
				continue
			}
			if got.Key != tc.driver+"/unhealthy" || got.Effect != tc.effect || got.Value != "" || got.TimeAdded != nil {
				t.Errorf("HealthTaint(%q, %q) = %+v", tc.driver, tc.effect, got)
			}
			continue
		}
		if err == nil || !errors.Is(err, inventory.ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("HealthTaint(%q, %q) error = %v, want one matching ErrInvalid containing %q", tc.driver, tc.effect, err, tc.wantErr)
		}
	}
}

func TestWithdrawDevices(t *testing.T) {
	id := func(p, d string) inventory.DeviceID { return inventory.DeviceID{Pool: p, Device: d} }
	inv := inventory.Inventory{Pools: []inventory.Pool{
		{Name: "node-1", Devices: []resourceapi.Device{{Name: "gpu-0"}, {Name: "gpu-1"}, {Name: "gpu-2"}}},
		{Name: "node-1-b", Devices: []resourceapi.Device{{Name: "gpu-0"}}},
	}}
	for _, tc := range []struct {
		name          string
		unhealthy     map[inventory.DeviceID]bool
		want          []string
		wantWithdrawn int
	}{
		{name: "all healthy", want: []string{"node-1/gpu-0", "node-1/gpu-1", "node-1/gpu-2", "node-1-b/gpu-0"}},
		{name: "one unhealthy", unhealthy: map[inventory.DeviceID]bool{id("node-1", "gpu-1"): true},
			want: []string{"node-1/gpu-0", "node-1/gpu-2", "node-1-b/gpu-0"}, wantWithdrawn: 1},
		{name: "same device name in another pool", unhealthy: map[inventory.DeviceID]bool{id("node-1-b", "gpu-0"): true},
			want: []string{"node-1/gpu-0", "node-1/gpu-1", "node-1/gpu-2"}, wantWithdrawn: 1},
		{name: "false is healthy", unhealthy: map[inventory.DeviceID]bool{id("node-1", "gpu-1"): false},
			want: []string{"node-1/gpu-0", "node-1/gpu-1", "node-1/gpu-2", "node-1-b/gpu-0"}},
		{name: "unknown device ignored", unhealthy: map[inventory.DeviceID]bool{id("node-1", "gpu-9"): true, id("other", "gpu-0"): true},
			want: []string{"node-1/gpu-0", "node-1/gpu-1", "node-1/gpu-2", "node-1-b/gpu-0"}},
		{name: "a pool emptied stays", unhealthy: map[inventory.DeviceID]bool{id("node-1-b", "gpu-0"): true, id("node-1", "gpu-0"): true},
			want: []string{"node-1/gpu-1", "node-1/gpu-2"}, wantWithdrawn: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, n := inventory.WithdrawDevices(inv, tc.unhealthy)
			var names []string
			for _, p := range got.Pools {
				for _, d := range p.Devices {
					names = append(names, p.Name+"/"+d.Name)
				}
			}
			if !slices.Equal(names, tc.want) || n != tc.wantWithdrawn {
				t.Errorf("devices %q, %d withdrawn; want %q, %d", names, n, tc.want, tc.wantWithdrawn)
			}
			if len(got.Pools) != len(inv.Pools) {
				t.Errorf("%d pools, want %d: a pool emptied must stay", len(got.Pools), len(inv.Pools))
			}
			if err := inventory.Validate(got); err != nil {
				t.Errorf("the result does not validate: %v", err)
			}
			if len(inv.Pools[0].Devices) != 3 || len(inv.Pools[1].Devices) != 1 {
				t.Errorf("the input changed: %+v", inv.Pools)
			}
		})
	}
}
