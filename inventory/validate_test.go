package inventory_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/inventory/inventorytest"
	resourceapi "k8s.io/api/resource/v1"
)

func TestValidate(t *testing.T) {
	for _, tt := range inventorytest.Cases() {
		t.Run(tt.Name, func(t *testing.T) {
			err := inventory.Validate(tt.Inventory())
			if (err == nil) != tt.Valid {
				t.Fatalf("err = %v, want valid=%v", err, tt.Valid)
			}
			if err == nil {
				return
			}
			var verr *inventory.ValidationError
			if !errors.Is(err, inventory.ErrInvalid) || !errors.As(err, &verr) || len(verr.Problems) == 0 {
				t.Fatalf("error %v is not a *ValidationError matching ErrInvalid", err)
			}
			if !strings.HasPrefix(verr.Problems[0].Field, "pools[0]") {
				t.Errorf("problem %q does not name the field", verr.Problems[0])
			}
		})
	}
}

// problemAt fails the test unless err is a *ValidationError with a problem
// at field whose reason contains reason.
func problemAt(t *testing.T, err error, field, reason string) {
	t.Helper()
	var verr *inventory.ValidationError
	if !errors.As(err, &verr) || !errors.Is(err, inventory.ErrInvalid) {
		t.Fatalf("err = %v, want a *ValidationError matching ErrInvalid", err)
	}
	for _, p := range verr.Problems {
		if p.Field == field && strings.Contains(p.Reason, reason) {
			return
		}
	}
	t.Errorf("no problem at %s with %q in %v", field, reason, verr.Problems)
}

func TestValidateAcrossPoolsAndDevices(t *testing.T) {
	counterSet := func(name string, counters ...string) resourceapi.CounterSet {
		cs := resourceapi.CounterSet{Name: name, Counters: map[string]resourceapi.Counter{}}
		for _, c := range counters {
			cs.Counters[c] = resourceapi.Counter{}
		}
		return cs
	}
	consuming := func(name string, uses ...resourceapi.DeviceCounterConsumption) resourceapi.Device {
		d := inventorytest.Device(name, "a100")
		d.ConsumesCounters = uses
		return d
	}
	use := func(set string, counters ...string) resourceapi.DeviceCounterConsumption {
		u := resourceapi.DeviceCounterConsumption{CounterSet: set, Counters: map[string]resourceapi.Counter{}}
		for _, c := range counters {
			u.Counters[c] = resourceapi.Counter{}
		}
		return u
	}
	for _, tc := range []struct {
		name          string
		pools         []inventory.Pool
		field, reason string
	}{
		{"duplicate pool", []inventory.Pool{{Name: "a"}, {Name: "a"}}, "pools[1].name", `duplicate pool name "a" (also pools[0])`},
		{"empty pool name", []inventory.Pool{{Name: ""}}, "pools[0].name", "must not be empty"},
		{"duplicate device", []inventory.Pool{{Name: "a", Devices: []resourceapi.Device{inventorytest.Device("d", "x"), inventorytest.Device("d", "y")}}},
			"pools[0].devices[1].name", `duplicate device name "d" (also devices[0])`},
		{"duplicate counter set", []inventory.Pool{{Name: "a", SharedCounters: []resourceapi.CounterSet{counterSet("mem", "b"), counterSet("mem", "b")}}},
			"pools[0].sharedCounters[1].name", `duplicate counter set name "mem"`},
		{"empty counter set", []inventory.Pool{{Name: "a", SharedCounters: []resourceapi.CounterSet{counterSet("mem")}}},
			"pools[0].sharedCounters[0].counters", "must not be empty"},
		{"unknown counter", []inventory.Pool{{Name: "a", SharedCounters: []resourceapi.CounterSet{counterSet("mem", "bytes")},
			Devices: []resourceapi.Device{consuming("d", use("mem", "watts"))}}},
			`pools[0].devices[0].consumesCounters[0].counters["watts"]`, `counter set "mem" has no counter "watts"`},
		{"set consumed twice", []inventory.Pool{{Name: "a", SharedCounters: []resourceapi.CounterSet{counterSet("mem", "bytes")},
			Devices: []resourceapi.Device{consuming("d", use("mem", "bytes"), use("mem", "bytes"))}}},
			"pools[0].devices[0].consumesCounters[1].counterSet", `counter set "mem" consumed twice`},
		{"counter set of another pool", []inventory.Pool{
			{Name: "a", SharedCounters: []resourceapi.CounterSet{counterSet("mem", "bytes")}},
			{Name: "b", Devices: []resourceapi.Device{consuming("d", use("mem", "bytes"))}}},
			"pools[1].devices[0].consumesCounters[0].counterSet", `no counter set "mem"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problemAt(t, inventory.Validate(inventory.Inventory{Pools: tc.pools}), tc.field, tc.reason)
		})
	}
}

// Names and versions are checked once per pool only when valid; an invalid
// one is reported for every device that has it, each with its own path.
func TestValidateReportsEveryDeviceWithABadName(t *testing.T) {
	devices := inventorytest.Devices("dev-", 3)
	bad := "not-semver"
	for i := range devices {
		devices[i].Attributes["bad name!"] = resourceapi.DeviceAttribute{VersionValue: &bad}
	}
	err := inventory.Validate(inventory.Inventory{Pools: []inventory.Pool{{Name: "pool", Devices: devices}}})
	for i := range devices {
		problemAt(t, err, fmt.Sprintf(`pools[0].devices[%d].attributes["bad name!"]`, i), "")
		problemAt(t, err, fmt.Sprintf(`pools[0].devices[%d].attributes["bad name!"].version`, i), `"not-semver" is not a semantic version`)
	}
}

// ValidateIncremental skips the device checks of unchanged devices but
// still checks what involves the rest of the pool.
func TestValidateIncremental(t *testing.T) {
	devices := inventorytest.Devices("dev-", 3)
	devices[1].Name = "Bad_Name"
	devices[2].Name = "dev-0"
	inv := inventory.Inventory{Pools: []inventory.Pool{{Name: "pool", Devices: devices}}}

	problemAt(t, inventory.ValidateIncremental(inv, nil), "pools[0].devices[1].name", "RFC 1123")

	var asked [][2]int
	all := func(pool, device int) bool { asked = append(asked, [2]int{pool, device}); return true }
	err := inventory.ValidateIncremental(inv, all)
	problemAt(t, err, "pools[0].devices[2].name", `duplicate device name "dev-0"`)
	var verr *inventory.ValidationError
	errors.As(err, &verr)
	for _, p := range verr.Problems {
		if p.Field == "pools[0].devices[1].name" {
			t.Errorf("a device reported unchanged was checked again: %v", p)
		}
	}
	if len(asked) != 3 || asked[0] != [2]int{0, 0} || asked[2] != [2]int{0, 2} {
		t.Errorf("unchanged asked about %v, want pool 0, devices 0 to 2", asked)
	}
}

func TestValidationErrorMessage(t *testing.T) {
	devices := inventorytest.Devices("dev-", 7)
	for i := range devices {
		devices[i].Name = fmt.Sprintf("D%d", i)
	}
	err := inventory.Validate(inventory.Inventory{Pools: []inventory.Pool{{Name: "pool", Devices: devices}}})
	msg := err.Error()
	for _, want := range []string{"invalid inventory: 7 problem(s): ", "pools[0].devices[0].name: ", "pools[0].devices[4].name: ", "; and 2 more"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "devices[5]") {
		t.Errorf("message %q shows more than 5 problems", msg)
	}
}

func TestValidateDriverName(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string // "" for a valid name
	}{
		{"gpu.example.com", ""},
		{"a", ""},
		{"", "must not be empty"},
		{"Not_A_Driver", `"Not_A_Driver": a lowercase RFC 1123 subdomain`},
		{strings.Repeat("a", 64), "longer than 63 characters"},
		{"gpu..example.com", `"gpu..example.com"`},
	} {
		err := inventory.ValidateDriverName(tc.name)
		if tc.reason == "" {
			if err != nil {
				t.Errorf("ValidateDriverName(%q) = %v", tc.name, err)
			}
			continue
		}
		problemAt(t, err, "driverName", tc.reason)
	}
}
