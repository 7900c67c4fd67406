package sliceclient

import (
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

type validationCase struct {
	name          string
	pool          Pool
	valid         bool
	serverRejects bool // the server checks this rule too
}

func withDevice(mutate func(d *resourceapi.Device)) Pool {
	d := testDevice("dev-0", "a100")
	mutate(&d)
	return Pool{Name: "pool", Devices: []resourceapi.Device{d}}
}

func validationCases() []validationCase {
	attr := func(v resourceapi.DeviceAttribute) func(d *resourceapi.Device) {
		return func(d *resourceapi.Device) { d.Attributes["gpu.example.com/x"] = v }
	}
	many := func(d *resourceapi.Device) {
		for i := range 31 {
			d.Attributes[resourceapi.QualifiedName("a"+strings.Repeat("b", i))] = resourceapi.DeviceAttribute{BoolValue: ptrTo(true)}
		}
	}
	return []validationCase{
		{"plain device", withDevice(func(*resourceapi.Device) {}), true, false},
		{"pool name with slash", Pool{Name: "rack-1/pool", Devices: testDevices("d-", 2)}, true, false},
		{"empty pool", Pool{Name: "pool"}, true, false},
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
		{"counters", Pool{Name: "pool",
			SharedCounters: []resourceapi.CounterSet{{Name: "mem", Counters: map[string]resourceapi.Counter{"bytes": {}}}},
			Devices: []resourceapi.Device{func() resourceapi.Device {
				d := testDevice("part-0", "a100")
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
		{"duplicate device", Pool{Name: "pool", Devices: []resourceapi.Device{testDevice("d", "a"), testDevice("d", "b")}}, false, true},
		{"bad taint effect", withDevice(func(d *resourceapi.Device) {
			d.Taints = []resourceapi.DeviceTaint{{Key: "example.com/x", Effect: "Sometimes"}}
		}), false, true},
		{"bad pool name", Pool{Name: "Pool_A", Devices: testDevices("d-", 1)}, false, true},
		{"consumes unknown counter set", withDevice(func(d *resourceapi.Device) {
			d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "nope", Counters: map[string]resourceapi.Counter{"c": {}}}}
		}), false, false},
	}
}
