package sliceclient

import (
	"errors"
	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/inventory/inventorytest"
	"os"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"
)

func TestDryRunWriteDir(t *testing.T) {
	dir := t.TempDir()
	dry := DryRun{DriverName: testDriver, NodeName: testNode, NodeUID: "uid-1"}
	other := DryRun{DriverName: "other.example.com", NodeName: testNode}
	if _, err := other.WriteDir(dir, inventory.Inventory{Pools: []inventory.Pool{{Name: "x", Devices: inventorytest.Devices("o-", 1)}}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "unrelated.yaml"), []byte("not: a slice\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	paths, err := dry.WriteDir(dir, inventory.Inventory{Pools: []inventory.Pool{{Name: "a", Devices: inventorytest.Devices("d-", 200)}, {Name: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 3 {
		t.Fatalf("%d files, want 3 (two slices for a, one for b)", len(paths))
	}
	total := 0
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var s resourceapi.ResourceSlice
		if err := yaml.UnmarshalStrict(data, &s); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if s.Kind != "ResourceSlice" || s.APIVersion != "resource.k8s.io/v1" || s.Spec.Driver != testDriver ||
			len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "uid-1" {
			t.Fatalf("%s: unexpected content %+v", p, s.ObjectMeta)
		}
		total += len(s.Spec.Devices)
	}
	if total != 200 {
		t.Fatalf("%d devices written, want 200", total)
	}

	// A smaller inventory removes the files it no longer needs, and only those.
	paths, err = dry.WriteDir(dir, inventory.Inventory{Pools: []inventory.Pool{{Name: "a", Devices: inventorytest.Devices("d-", 5)}}})
	if err != nil || len(paths) != 1 {
		t.Fatalf("second write: %v, %d paths", err, len(paths))
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(left) != 3 { // ours, the other driver's, unrelated.yaml
		t.Fatalf("files left: %v", left)
	}

	// An invalid inventory writes nothing.
	before, _ := os.ReadFile(paths[0])
	_, err = dry.WriteDir(dir, inventory.Inventory{Pools: []inventory.Pool{{Name: "a", Devices: append(inventorytest.Devices("d-", 5), inventorytest.Device("d-0", "dup"))}}})
	if !errors.Is(err, inventory.ErrInvalid) {
		t.Fatalf("invalid inventory: %v", err)
	}
	after, _ := os.ReadFile(paths[0])
	if string(before) != string(after) {
		t.Fatal("a rejected inventory changed a file")
	}
}
