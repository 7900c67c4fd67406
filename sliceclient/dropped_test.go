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
