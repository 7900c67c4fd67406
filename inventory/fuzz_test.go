package inventory_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dranode/dranode/inventory"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzValidate: checking each attribute name and version once per pool
// changes nothing: a second, identical device gets exactly the problems the
// first one gets (under its own path), plus being a duplicate; a device
// name is accepted exactly when validation.IsDNS1123Label accepts it; every
// rejection is a *ValidationError.
func FuzzValidate(f *testing.F) {
	f.Add("gpu-0", "gpu.example.com/model", "a100", "1.2.3")
	f.Add("GPU_0", "9lives", strings.Repeat("s", 65), "v1")
	f.Add("d", "a/b/c", "", "1.0.0-rc.1+build.5")
	f.Fuzz(func(t *testing.T, name, attr, str, version string) {
		d := resourceapi.Device{
			Name: name,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				resourceapi.QualifiedName(attr): {StringValue: &str},
				"version":                       {VersionValue: &version},
			},
		}
		var twin resourceapi.Device
		d.DeepCopyInto(&twin)
		err := inventory.Validate(inventory.Inventory{Pools: []inventory.Pool{{Name: "p", Devices: []resourceapi.Device{d, twin}}}})
		var verr *inventory.ValidationError
		if !errors.As(err, &verr) || !errors.Is(err, inventory.ErrInvalid) {
			t.Fatalf("err = %v, want a *ValidationError matching ErrInvalid (the devices are duplicates)", err)
		}
		var first, second []string
		duplicate := 0
		for _, p := range verr.Problems {
			switch {
			case p.Field == "pools[0].devices[1].name" && strings.HasPrefix(p.Reason, "duplicate device name"):
				duplicate++
			case strings.HasPrefix(p.Field, "pools[0].devices[0]"):
				first = append(first, strings.TrimPrefix(p.String(), "pools[0].devices[0]"))
			case strings.HasPrefix(p.Field, "pools[0].devices[1]"):
				second = append(second, strings.TrimPrefix(p.String(), "pools[0].devices[1]"))
			default:
				t.Fatalf("problem outside the devices: %v", p)
			}
		}
		slices.Sort(first)
		slices.Sort(second)
		if duplicate != 1 || !slices.Equal(first, second) {
			t.Fatalf("identical devices judged differently (duplicate reported %d times):\n%q\n%q", duplicate, first, second)
		}
		nameOK := !slices.ContainsFunc(first, func(s string) bool { return strings.HasPrefix(s, ".name:") })
		if want := len(validation.IsDNS1123Label(name)) == 0; nameOK != want {
			t.Fatalf("device name %q accepted=%v, validation.IsDNS1123Label says %v", name, nameOK, want)
		}
	})
}
