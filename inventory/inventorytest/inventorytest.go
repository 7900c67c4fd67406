package inventorytest

import (
	"strconv"
	"strings"

	"github.com/dranode/dranode/inventory"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Device returns a valid device with two attributes (one with a domain) and
// a capacity; model is the value of its "model" attribute, so that devices
// made with different models differ only there.
func Device(name, model string) resourceapi.Device {
	index := int64(len(name))
	return resourceapi.Device{
		Name: name,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"model":                 {StringValue: &model},
			"gpu.example.com/index": {IntValue: &index},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory": {Value: resource.MustParse("16Gi")},
		},
	}
}

// Devices returns n devices made by Device, named prefix0 to prefix(n-1),
// all of model "a100".
func Devices(prefix string, n int) []resourceapi.Device {
	out := make([]resourceapi.Device, n)
	for i := range out {
		out[i] = Device(prefix+strconv.Itoa(i), "a100")
	}
	return out
}

// Case is a one-pool inventory and what inventory.Validate must say of it.
type Case struct {
	Name string
	Pool inventory.Pool
	// Valid: Validate accepts the pool. The API server then accepts its
	// slices too.
	Valid bool
	// ServerRejects: the API server refuses the pool's slices as well (for
	// an invalid pool). False for rules the server cannot check, such as
	// references between a pool's slices.
	ServerRejects bool
}

// Inventory returns the case's pool as an inventory.
func (c Case) Inventory() inventory.Inventory {
	return inventory.Inventory{Pools: []inventory.Pool{c.Pool}}
}

func withDevice(mutate func(d *resourceapi.Device)) inventory.Pool {
	d := Device("dev-0", "a100")
	mutate(&d)
	return inventory.Pool{Name: "pool", Devices: []resourceapi.Device{d}}
}

func ptrTo[T any](v T) *T { return &v }

// Cases returns the validation cases: valid ones at the limits, and one or
// more invalid ones per rule. Each call returns new values.
func Cases() []Case {
	attr := func(v resourceapi.DeviceAttribute) func(d *resourceapi.Device) {
		return func(d *resourceapi.Device) { d.Attributes["gpu.example.com/x"] = v }
	}
	// 31 more attributes: 34 attributes and capacities with Device's.
	many := func(d *resourceapi.Device) {
		for i := range 31 {
			d.Attributes[resourceapi.QualifiedName("a"+strings.Repeat("b", i))] = resourceapi.DeviceAttribute{BoolValue: ptrTo(true)}
		}
	}
	return []Case{
		{"plain device", withDevice(func(*resourceapi.Device) {}), true, false},
		{"pool name with slash", inventory.Pool{Name: "rack-1/pool", Devices: Devices("d-", 2)}, true, false},
		{"empty pool", inventory.Pool{Name: "pool"}, true, false},
		{"max attributes", withDevice(func(d *resourceapi.Device) {
			many(d)
			delete(d.Attributes, resourceapi.QualifiedName("a"+strings.Repeat("b", 30)))
			delete(d.Attributes, resourceapi.QualifiedName("a"+strings.Repeat("b", 29)))
		}), true, false},
		{"list attribute (alpha gate off)", withDevice(attr(resourceapi.DeviceAttribute{IntValues: []int64{1, 2}})), false, true},
		{"version attribute", withDevice(attr(resourceapi.DeviceAttribute{VersionValue: ptrTo("1.2.3-rc.1+b5")})), true, false},
		{"taint", withDevice(func(d *resourceapi.Device) {
			d.Taints = []resourceapi.DeviceTaint{{Key: "example.com/unhealthy", Value: "yes", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		}), true, false},
		{"counters", inventory.Pool{Name: "pool",
			SharedCounters: []resourceapi.CounterSet{{Name: "mem", Counters: map[string]resourceapi.Counter{"bytes": {}}}},
			Devices: []resourceapi.Device{func() resourceapi.Device {
				d := Device("part-0", "a100")
				d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "mem", Counters: map[string]resourceapi.Counter{"bytes": {}}}}
				return d
			}()}}, true, false},

		{"device name upper case", withDevice(func(d *resourceapi.Device) { d.Name = "Dev-0" }), false, true},
		{"device name too long", withDevice(func(d *resourceapi.Device) { d.Name = strings.Repeat("d", 64) }), false, true},
		{"too many attributes and capacities", withDevice(many), false, true},
		{"attribute with two values", withDevice(attr(resourceapi.DeviceAttribute{BoolValue: ptrTo(true), IntValue: ptrTo(int64(1))})), false, true},
		{"attribute with no value", withDevice(attr(resourceapi.DeviceAttribute{})), false, true},

		{"bad attribute name", withDevice(func(d *resourceapi.Device) {
			d.Attributes["9lives"] = resourceapi.DeviceAttribute{BoolValue: ptrTo(true)}
		}), false, true},
		{"identifier too long", withDevice(func(d *resourceapi.Device) {
			d.Attributes[resourceapi.QualifiedName(strings.Repeat("x", 33))] = resourceapi.DeviceAttribute{BoolValue: ptrTo(true)}
		}), false, true},
		{"string too long", withDevice(attr(resourceapi.DeviceAttribute{StringValue: ptrTo(strings.Repeat("s", 65))})), false, true},
		{"not a version", withDevice(attr(resourceapi.DeviceAttribute{VersionValue: ptrTo("v1")})), false, true},
		{"empty list", withDevice(attr(resourceapi.DeviceAttribute{StringValues: []string{}})), false, true},
		{"duplicate device", inventory.Pool{Name: "pool", Devices: []resourceapi.Device{Device("d", "a"), Device("d", "b")}}, false, true},
		{"bad taint effect", withDevice(func(d *resourceapi.Device) {
			d.Taints = []resourceapi.DeviceTaint{{Key: "example.com/x", Effect: "Sometimes"}}
		}), false, true},
		{"bad pool name", inventory.Pool{Name: "Pool_A", Devices: Devices("d-", 1)}, false, true},
		{"consumes unknown counter set", withDevice(func(d *resourceapi.Device) {
			d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "nope", Counters: map[string]resourceapi.Counter{"c": {}}}}
		}), false, false},
	}
}
