package sliceclient

import (
	"errors"
	"strings"
	"testing"
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
	for _, o := range []Options{
		{DriverName: testDriver, NodeName: testNode},
		{Client: fakeClient(), DriverName: "Not_A_Driver", NodeName: testNode},
		{Client: fakeClient(), DriverName: testDriver},
		{Client: fakeClient(), DriverName: testDriver, NodeName: "UPPER"},
	} {
		if _, err := New(o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
}
