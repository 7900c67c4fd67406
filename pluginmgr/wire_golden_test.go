package pluginmgr

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/inventory"
	pb "github.com/dranode/dranode/pluginmgr/proto/dranode/plugin/v1"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/wire/*.pb from the current encoder (only when the protocol changes on purpose: plugins built before would break)")

// goldenInventory exercises every part of an inventory message: several
// pools, devices with attributes of each kind, capacities, counter
// consumption, and shared counters.
func goldenInventory() inventory.Inventory {
	devices := []resourcev1.Device{
		{
			Name: "gpu-0",
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"index":                    {IntValue: ptr.To(int64(0))},
				"model":                    {StringValue: ptr.To("X1")},
				"gpu.example.com/mig":      {BoolValue: ptr.To(true)},
				"gpu.example.com/firmware": {VersionValue: ptr.To("1.2.3")},
			},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
				"memory": {Value: resource.MustParse("40Gi")},
			},
			ConsumesCounters: []resourcev1.DeviceCounterConsumption{{
				CounterSet: "gpu-0-counters",
				Counters:   map[string]resourcev1.Counter{"memory": {Value: resource.MustParse("40Gi")}},
			}},
		},
		{Name: "gpu-1"},
	}
	counters := []resourcev1.CounterSet{{
		Name:     "gpu-0-counters",
		Counters: map[string]resourcev1.Counter{"memory": {Value: resource.MustParse("40Gi")}},
	}}
	return inventory.Inventory{Pools: []inventory.Pool{
		{Name: "node-a", Devices: devices, SharedCounters: counters},
		{Name: "node-a/extra", Devices: []resourcev1.Device{{Name: "nic-0"}}},
	}}
}

// TestInventoryWireIsStable holds the encoding of an inventory to bytes
// written by the protocol's first release (testdata/wire/inventory.pb): a
// plugin built against any earlier release of this module sends exactly
// these bytes, so the host must keep decoding them to the same inventory,
// and a plugin built now must keep sending them to hosts built before.
func TestInventoryWireIsStable(t *testing.T) {
	golden := filepath.Join("testdata", "wire", "inventory.pb")
	inv := goldenInventory()
	msg, err := inventoryToWire(inv)
	if err != nil {
		t.Fatal(err)
	}
	encoded, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	if *updateGolden {
		if err := os.WriteFile(golden, encoded, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(encoded, want) {
		t.Errorf("the plugin side encodes an inventory differently from %s (%d bytes, want %d): hosts built before this change would misread it", golden, len(encoded), len(want))
	}
	var old pb.Inventory
	if err := proto.Unmarshal(want, &old); err != nil {
		t.Fatal(err)
	}
	decoded, err := InventoryFromWire(&old)
	if err != nil {
		t.Fatalf("the host no longer decodes %s: %v", golden, err)
	}
	if normalize(t, decoded) != normalize(t, inv) {
		t.Errorf("the host decodes %s to\n%+v\nwant\n%+v", golden, decoded, inv)
	}
}
