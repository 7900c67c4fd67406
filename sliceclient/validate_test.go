package sliceclient

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestValidateInventory(t *testing.T) {
	for _, tt := range validationCases() {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateInventory(Inventory{Pools: []Pool{tt.pool}})
			if (err == nil) != tt.valid {
				t.Fatalf("err = %v, want valid=%v", err, tt.valid)
			}
			if err == nil {
				return
			}
			var verr *ValidationError
			if !errors.Is(err, ErrInvalidInventory) || !errors.As(err, &verr) || len(verr.Problems) == 0 {
				t.Fatalf("error %v is not a *ValidationError matching ErrInvalidInventory", err)
			}
			if !strings.HasPrefix(verr.Problems[0].Field, "pools[0]") {
				t.Errorf("problem %q does not name the field", verr.Problems[0])
			}
		})
	}
}

func TestValidateDuplicatePools(t *testing.T) {
	err := ValidateInventory(Inventory{Pools: []Pool{{Name: "a"}, {Name: "a"}}})
	if err == nil || !strings.Contains(err.Error(), "duplicate pool name") {
		t.Fatalf("duplicate pools: %v", err)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	slicesOnly := Client{ResourceSlices: fakeClient().ResourceSlices}
	for _, tc := range []struct {
		opts Options
		want string // in the error: what was wrong
	}{
		{Options{DriverName: testDriver, NodeName: testNode}, "Client.ResourceSlices is nil"},
		{Options{Client: slicesOnly, DriverName: testDriver, NodeName: testNode}, "Client.Nodes is nil and NodeUID is empty"},
		{Options{Client: fakeClient(), DriverName: "Not_A_Driver", NodeName: testNode}, "Not_A_Driver"},
		{Options{Client: fakeClient(), DriverName: testDriver}, "NodeName is empty"},
		{Options{Client: fakeClient(), DriverName: testDriver, NodeName: "UPPER"}, "UPPER"},
	} {
		_, err := New(tc.opts)
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOptions naming %q", tc.opts, err, tc.want)
		}
	}
	// Nodes is only read for the owner's UID: with NodeUID given it may be nil.
	if _, err := New(Options{Client: slicesOnly, DriverName: testDriver, NodeName: testNode, NodeUID: "uid-1"}); err != nil {
		t.Errorf("New without Nodes but with NodeUID: %v", err)
	}
}

// TestIsDNSLabelAgreesWithValidation: the regexp-free device name check
// accepts exactly what validation.IsDNS1123Label accepts.
func TestIsDNSLabelAgreesWithValidation(t *testing.T) {
	for _, name := range []string{
		"", "a", "0", "-", "a-", "-a", "a-b", "a--b", "gpu-0", "GPU-0", "gpu_0", "gpu.0", "gpu 0", "é",
		strings.Repeat("a", 63), strings.Repeat("a", 64), "a" + strings.Repeat("-", 61) + "b",
	} {
		want := len(validation.IsDNS1123Label(name)) == 0
		if got := isDNSLabel(name); got != want {
			t.Errorf("isDNSLabel(%q) = %v, validation.IsDNS1123Label says valid=%v", name, got, want)
		}
	}
}

// TestValidateReportsEveryDeviceWithABadName: names and versions are
// checked once per pool only when valid; an invalid one is reported for
// every device that has it, each with its own path.
func TestValidateReportsEveryDeviceWithABadName(t *testing.T) {
	devices := testDevices("dev-", 3)
	for i := range devices {
		devices[i].Attributes["bad name!"] = resourceapi.DeviceAttribute{VersionValue: ptrTo("not-semver")}
	}
	err := ValidateInventory(Inventory{Pools: []Pool{{Name: "pool", Devices: devices}}})
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("err = %v, want a *ValidationError", err)
	}
	for i := range devices {
		for _, suffix := range []string{`.attributes["bad name!"]`, `.attributes["bad name!"].version`} {
			field := fmt.Sprintf("pools[0].devices[%d]%s", i, suffix)
			found := false
			for _, p := range verr.Problems {
				found = found || p.Field == field
			}
			if !found {
				t.Errorf("no problem reported at %s; got %v", field, verr.Problems)
			}
		}
	}
}
