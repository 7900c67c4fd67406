package pluginmgr

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/inventory"
	pb "github.com/dranode/dranode/pluginmgr/proto/dranode/plugin/v1"
)

func TestEditsRoundTrip(t *testing.T) {
	tests := []ContainerEdits{
		{},
		{Env: []string{"A=1"}},
		{DeviceNodes: []DeviceNode{{Path: "/dev/x"}, {Path: "/dev/y", HostPath: "/h", Type: "c", Major: 1, Minor: 2,
			FileMode: ptr.To(uint32(0)), Permissions: "rw", UID: ptr.To(uint32(0)), GID: ptr.To(uint32(7))}}},
		{Mounts: []Mount{{HostPath: "/a", ContainerPath: "/b", Type: "bind", Options: []string{"ro"}}},
			Hooks: []Hook{{HookName: "createContainer", Path: "/bin/h", Args: []string{"h"}, Env: []string{"X=y"}, Timeout: ptr.To(int64(0))}, {HookName: "poststop", Path: "/bin/p"}}},
	}
	for i, e := range tests {
		// Through real protobuf bytes, as on the wire.
		b, err := proto.Marshal(editsToWire(e))
		if err != nil {
			t.Fatal(err)
		}
		var msg pb.ContainerEdits
		if err := proto.Unmarshal(b, &msg); err != nil {
			t.Fatal(err)
		}
		if got := editsFromWire(&msg); !reflect.DeepEqual(got, e) {
			t.Errorf("case %d: round trip\n got %+v\nwant %+v", i, got, e)
		}
	}
}

func TestInventoryAndClaimsRoundTrip(t *testing.T) {
	inv := inventory.Inventory{Pools: []inventory.Pool{{
		Name: "a/b",
		Devices: []resourcev1.Device{{
			Name:       "d0",
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"x.example.com/v": {VersionValue: ptr.To("1.0.0")}},
			Capacity:   map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"mem": {Value: resource.MustParse("2Gi")}},
			ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: "cs",
				Counters: map[string]resourcev1.Counter{"c": {Value: resource.MustParse("1")}}}},
		}},
		SharedCounters: []resourcev1.CounterSet{{Name: "cs", Counters: map[string]resourcev1.Counter{"c": {Value: resource.MustParse("4")}}}},
	}}}
	w, err := inventoryToWire(inv)
	if err != nil {
		t.Fatal(err)
	}
	got, err := InventoryFromWire(w)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalize(t, got), normalize(t, inv)) {
		t.Errorf("inventory round trip\n got %+v\nwant %+v", got, inv)
	}

	claims := []Claim{{UID: "u", Namespace: "n", Name: "c",
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: "r/s", Driver: "d.example.com", Pool: "p", Device: "d0",
			AdminAccess: ptr.To(true), ShareID: ptr.To(resourceUID("6a7d0f4c-0000-4000-8000-000000000001"))}},
		Configs: []resourcev1.DeviceAllocationConfiguration{{Source: resourcev1.AllocationConfigSourceClass, Requests: []string{"r"},
			DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: "d.example.com", Parameters: runtime.RawExtension{Raw: []byte(`{"a":1}`)}}}}},
	}}
	cw, err := claimsToWire(claims)
	if err != nil {
		t.Fatal(err)
	}
	back, err := claimsFromWire(cw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, claims) {
		t.Errorf("claims round trip\n got %+v\nwant %+v", back, claims)
	}
}

// What Prepare answered comes back on Unprepare whole: a shared device's
// share ID and an admin-access device's flag included, so that a driver
// releases the right share and does not reset a device it did not own.
func TestPreparedClaimsRoundTrip(t *testing.T) {
	claims := []PreparedClaim{{UID: "u", Namespace: "n", Name: "c", Devices: []PreparedDevice{
		{Pool: "p", Device: "d0", Requests: []string{"r0"}, ShareID: "6a7d0f4c-0000-4000-8000-000000000001"},
		{Pool: "p", Device: "d0", Requests: []string{"r1"}, ShareID: "6a7d0f4c-0000-4000-8000-000000000002"},
		{Pool: "p", Device: "d1", Requests: []string{"r2"}, AdminAccess: true, Edits: ContainerEdits{Env: []string{"MONITOR=1"}}},
	}}}
	w, err := preparedClaimsToWire(claims)
	if err != nil {
		t.Fatal(err)
	}
	back, err := preparedClaimsFromWire(w)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, claims) {
		t.Errorf("prepared claims round trip\n got %+v\nwant %+v", back, claims)
	}
}

func resourceUID(s string) types.UID { return types.UID(s) }

// normalize compares quantities by value: decoding caches their string form.
func normalize(t *testing.T, inv inventory.Inventory) string {
	t.Helper()
	w, err := inventoryToWire(inv)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestResultsMustMatchRequest(t *testing.T) {
	claims := []Claim{{UID: "a"}, {UID: "b"}}
	tests := []struct {
		name string
		in   []*pb.ClaimPrepareResult
	}{
		{"missing", []*pb.ClaimPrepareResult{{Uid: "a"}}},
		{"duplicate", []*pb.ClaimPrepareResult{{Uid: "a"}, {Uid: "a"}, {Uid: "b"}}},
		{"extra", []*pb.ClaimPrepareResult{{Uid: "a"}, {Uid: "b"}, {Uid: "c"}}},
	}
	for _, tt := range tests {
		if _, err := prepareResultsFromWire(claims, tt.in); !errors.Is(err, ErrInvalidResponse) {
			t.Errorf("%s: error %v, want ErrInvalidResponse", tt.name, err)
		}
	}
	out, err := prepareResultsFromWire(claims, []*pb.ClaimPrepareResult{{Uid: "b", Error: "boom"}, {Uid: "a"}})
	if err != nil || out[0].ClaimUID != "a" || out[0].Err != nil || out[1].ClaimUID != "b" || out[1].Err == nil {
		t.Errorf("reordered results = %+v, %v", out, err)
	}
	prepared := []PreparedClaim{{UID: "a"}, {UID: "b"}}
	for _, in := range [][]*pb.ClaimUnprepareResult{{{Uid: "a"}}, {{Uid: "a"}, {Uid: "a"}, {Uid: "b"}}, {{Uid: "a"}, {Uid: "b"}, {Uid: "c"}}} {
		if _, err := unprepareResultsFromWire(prepared, in); !errors.Is(err, ErrInvalidResponse) {
			t.Errorf("unprepare answers %v: error %v, want ErrInvalidResponse", in, err)
		}
	}
	uout, err := unprepareResultsFromWire(prepared, []*pb.ClaimUnprepareResult{{Uid: "b", Error: "boom"}, {Uid: "a"}})
	if err != nil || uout[0].ClaimUID != "a" || uout[0].Err != nil || uout[1].ClaimUID != "b" || uout[1].Err == nil {
		t.Errorf("reordered unprepare results = %+v, %v", uout, err)
	}
}

func TestUndecodableDeviceIsInvalidResponse(t *testing.T) {
	_, err := InventoryFromWire(&pb.Inventory{Pools: []*pb.Pool{{Name: "p", Devices: [][]byte{{0xff, 0xff, 0xff}}}}})
	if !errors.Is(err, ErrInvalidResponse) {
		t.Fatalf("error %v, want ErrInvalidResponse", err)
	}
}

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := b.delay(i + 1); got != w*time.Millisecond {
			t.Errorf("delay(%d) = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
}

func TestChecksumErrorNamesBoth(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bin")
	if err := os.WriteFile(path, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := checksumError(path, "00")
	var ce *ChecksumError
	if !errors.As(err, &ce) || !errors.Is(err, ErrChecksumMismatch) || ce.Expected != "00" ||
		ce.Actual != "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881" {
		t.Fatalf("checksumError = %#v", err)
	}
}
