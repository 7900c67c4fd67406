package sliceclient

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

func TestDroppedFieldsErrorTaintsDropped(t *testing.T) {
	taint := []resourceapi.DeviceTaint{{Key: "gpu.example.com/unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	slice := func(devices ...resourceapi.Device) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: devices}}
	}
	for _, tc := range []struct {
		name        string
		sent, saved *resourceapi.ResourceSlice
		want        bool
	}{
		{"taints kept", slice(resourceapi.Device{Name: "a", Taints: taint}), slice(resourceapi.Device{Name: "a", Taints: taint}), false},
		{"taints dropped", slice(resourceapi.Device{Name: "a"}, resourceapi.Device{Name: "b", Taints: taint}), slice(resourceapi.Device{Name: "a"}, resourceapi.Device{Name: "b"}), true},
		{"no taints sent, another field dropped", slice(resourceapi.Device{Name: "a", AllowMultipleAllocations: new(true)}), slice(resourceapi.Device{Name: "a"}), false},
		{"a device dropped whole is not a dropped taint", slice(resourceapi.Device{Name: "a", Taints: taint}), slice(), false},
		{"no objects", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &DroppedFieldsError{SliceName: "s", Sent: tc.sent, Saved: tc.saved}
			if got := e.TaintsDropped(); got != tc.want {
				t.Errorf("TaintsDropped() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDroppedFieldsErrorCountersDropped(t *testing.T) {
	consumes := []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0"}}
	counters := []resourceapi.CounterSet{{Name: "gpu-0"}}
	devices := func(devices ...resourceapi.Device) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: devices}}
	}
	sets := func(sets []resourceapi.CounterSet) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{SharedCounters: sets}}
	}
	for _, tc := range []struct {
		name        string
		sent, saved *resourceapi.ResourceSlice
		want        bool
	}{
		{"consumption kept", devices(resourceapi.Device{Name: "a", ConsumesCounters: consumes}), devices(resourceapi.Device{Name: "a", ConsumesCounters: consumes}), false},
		{"consumption dropped", devices(resourceapi.Device{Name: "a"}, resourceapi.Device{Name: "b", ConsumesCounters: consumes}), devices(resourceapi.Device{Name: "a"}, resourceapi.Device{Name: "b"}), true},
		{"counter sets kept", sets(counters), sets(counters), false},
		{"counter sets dropped", sets(counters), sets(nil), true},
		{"another field dropped", devices(resourceapi.Device{Name: "a", AllowMultipleAllocations: new(true)}), devices(resourceapi.Device{Name: "a"}), false},
		{"no objects", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &DroppedFieldsError{SliceName: "s", Sent: tc.sent, Saved: tc.saved}
			if got := e.CountersDropped(); got != tc.want {
				t.Errorf("CountersDropped() = %v, want %v", got, tc.want)
			}
		})
	}
}
