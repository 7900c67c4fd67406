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

func q(s string) *resource.Quantity { return ptrTo(resource.MustParse(s)) }

// consumable makes the device shared (allowMultipleAllocations) with its
// memory capacity consumed per share under policy.
func consumable(policy resourceapi.CapacityRequestPolicy) func(d *resourceapi.Device) {
	return func(d *resourceapi.Device) {
		d.AllowMultipleAllocations = ptrTo(true)
		c := d.Capacity["memory"]
		c.RequestPolicy = &policy
		d.Capacity["memory"] = c
	}
}

// Partitionable returns a pool with a partitionable device (KEP-4815): a
// counter set name with a memory counter of the given size, the whole
// device consuming all of it and n partitions consuming an n-th each, so
// that the scheduler allocates the whole device or partitions, never both.
func Partitionable(name, memory string, n int) inventory.Pool {
	total := resource.MustParse(memory)
	counters := func(v resource.Quantity) []resourceapi.DeviceCounterConsumption {
		return []resourceapi.DeviceCounterConsumption{{CounterSet: name, Counters: map[string]resourceapi.Counter{"memory": {Value: v}}}}
	}
	whole := Device(name, "a100")
	whole.ConsumesCounters = counters(total)
	pool := inventory.Pool{
		Name:           "pool",
		SharedCounters: []resourceapi.CounterSet{{Name: name, Counters: map[string]resourceapi.Counter{"memory": {Value: total}}}},
		Devices:        []resourceapi.Device{whole},
	}
	part := *resource.NewQuantity(total.Value()/int64(n), resource.BinarySI)
	for i := range n {
		d := Device(name+"-part-"+strconv.Itoa(i), "a100")
		d.Capacity["memory"] = resourceapi.DeviceCapacity{Value: part}
		d.ConsumesCounters = counters(part)
		pool.Devices = append(pool.Devices, d)
	}
	return pool
}

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
		{"shared device", withDevice(func(d *resourceapi.Device) { d.AllowMultipleAllocations = ptrTo(true) }), true, false},
		{"consumable capacity, range", withDevice(consumable(resourceapi.CapacityRequestPolicy{Default: q("1Gi"),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q("1Gi"), Max: q("16Gi"), Step: q("1Gi")}})), true, false},
		{"consumable capacity, values", withDevice(consumable(resourceapi.CapacityRequestPolicy{Default: q("4Gi"),
			ValidValues: []resource.Quantity{*q("4Gi"), *q("8Gi"), *q("16Gi")}})), true, false},
		{"consumable capacity, default only", withDevice(consumable(resourceapi.CapacityRequestPolicy{Default: q("2Gi")})), true, false},
		{"partitionable device", Partitionable("gpu-0", "16Gi", 2), true, false},

		{"request policy on a device not shared", withDevice(func(d *resourceapi.Device) {
			consumable(resourceapi.CapacityRequestPolicy{Default: q("1Gi")})(d)
			d.AllowMultipleAllocations = nil
		}), false, true},
		{"request policy with values and range", withDevice(consumable(resourceapi.CapacityRequestPolicy{Default: q("1Gi"),
			ValidValues: []resource.Quantity{*q("1Gi")}, ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q("1Gi")}})), false, true},
		{"request policy values unsorted", withDevice(consumable(resourceapi.CapacityRequestPolicy{Default: q("4Gi"),
			ValidValues: []resource.Quantity{*q("8Gi"), *q("4Gi")}})), false, true},
		{"request policy default not a value", withDevice(consumable(resourceapi.CapacityRequestPolicy{Default: q("2Gi"),
			ValidValues: []resource.Quantity{*q("4Gi"), *q("8Gi")}})), false, true},
		{"request policy value above capacity", withDevice(consumable(resourceapi.CapacityRequestPolicy{Default: q("4Gi"),
			ValidValues: []resource.Quantity{*q("4Gi"), *q("32Gi")}})), false, true},
		{"request policy range without default", withDevice(consumable(resourceapi.CapacityRequestPolicy{
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q("1Gi")}})), false, true},
		{"request policy range without min", withDevice(consumable(resourceapi.CapacityRequestPolicy{Default: q("1Gi"),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{}})), false, true},
		{"request policy range above capacity", withDevice(consumable(resourceapi.CapacityRequestPolicy{Default: q("1Gi"),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q("1Gi"), Max: q("32Gi")}})), false, true},
		{"request policy default below min", withDevice(consumable(resourceapi.CapacityRequestPolicy{Default: q("1Gi"),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q("2Gi")}})), false, true},
		{"request policy default off the steps", withDevice(consumable(resourceapi.CapacityRequestPolicy{Default: q("3Gi"),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q("2Gi"), Step: q("2Gi")}})), false, true},
		{"request policy step zero", withDevice(consumable(resourceapi.CapacityRequestPolicy{Default: q("2Gi"),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q("2Gi"), Step: q("0")}})), false, true},
		// The server reads a fractional range rounded unless an alpha gate
		// is on; Validate refuses it rather than guess.
		{"request policy fractional range", withDevice(consumable(resourceapi.CapacityRequestPolicy{Default: q("1500m"),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q("500m")}})), false, false},

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
