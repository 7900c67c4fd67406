package sliceclient

import (
	"errors"
	"strings"
	"testing"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/inventory/inventorytest"
)

func TestNewRejectsBadOptions(t *testing.T) {
	slicesOnly := Client{ResourceSlices: fakeClient().ResourceSlices}
	for _, tc := range []struct {
		opts Options
		want string // in the error: what was wrong
	}{
		{Options{DriverName: testDriver, NodeName: testNode}, "Client.ResourceSlices is nil"},
		{Options{Client: slicesOnly, DriverName: testDriver, NodeName: testNode}, "Client.Nodes is nil and NodeUID is empty"},
		{Options{Client: fakeClient(), DriverName: "Not_A_Driver", NodeName: testNode}, `driverName: "Not_A_Driver"`},
		{Options{Client: fakeClient(), NodeName: testNode}, "driverName: must not be empty"},
		{Options{Client: fakeClient(), DriverName: testDriver}, "NodeName is empty"},
		{Options{Client: fakeClient(), DriverName: testDriver, NodeName: "UPPER"}, `NodeName "UPPER"`},
	} {
		_, err := New(tc.opts)
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOptions naming %q", tc.opts, err, tc.want)
		}
		// Options are the caller's configuration, not its inventory.
		if errors.Is(err, inventory.ErrInvalid) {
			t.Errorf("New(%+v) = %v, which matches inventory.ErrInvalid", tc.opts, err)
		}
	}
	// Nodes is only read for the owner's UID: with NodeUID given it may be nil.
	if _, err := New(Options{Client: slicesOnly, DriverName: testDriver, NodeName: testNode, NodeUID: "uid-1"}); err != nil {
		t.Errorf("New without Nodes but with NodeUID: %v", err)
	}
}

// An inventory that inventory.Validate rejects is rejected by Update with
// that error, and the publisher keeps the one it had.
func TestUpdateRejectsInvalidInventory(t *testing.T) {
	p, err := New(Options{Client: fakeClient(), DriverName: testDriver, NodeName: testNode, NodeUID: "uid-1"})
	if err != nil {
		t.Fatal(err)
	}
	good := inventory.Inventory{Pools: []inventory.Pool{{Name: "pool", Devices: inventorytest.Devices("dev-", 3)}}}
	if err := p.Update(good); err != nil {
		t.Fatal(err)
	}
	for _, tc := range inventorytest.Cases() {
		if tc.Valid {
			continue
		}
		err := p.Update(tc.Inventory())
		var verr *inventory.ValidationError
		if !errors.Is(err, inventory.ErrInvalid) || !errors.As(err, &verr) {
			t.Errorf("%s: Update = %v, want an *inventory.ValidationError", tc.Name, err)
		}
	}
	// A device made invalid after it was accepted is validated again: the
	// shortcut for unchanged devices must not cover a changed one.
	bad := good.DeepCopy()
	bad.Pools[0].Devices[1].Attributes["9lives"] = bad.Pools[0].Devices[1].Attributes["model"]
	if err := p.Update(bad); !errors.Is(err, inventory.ErrInvalid) {
		t.Errorf("Update with a device changed to be invalid = %v, want inventory.ErrInvalid", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.inventory) != 1 || p.inventory["pool"] == nil || len(p.inventory["pool"].devices) != 3 {
		t.Errorf("a rejected update replaced the inventory: %v", p.inventory)
	}
}
