package sliceclient

import (
	"slices"

	resourceapi "k8s.io/api/resource/v1"
)

// zeroDeviceSize is the encoded size of a Device with nothing set.
var zeroDeviceSize = (&resourceapi.Device{}).Size()

// simpleDevice reports whether d sets nothing but its name, attributes and
// capacities. Checked through the encoded size so that a field added to
// Device in a later API version makes a device not simple, never ignored.
func simpleDevice(d *resourceapi.Device) bool {
	c := *d
	c.Name, c.Attributes, c.Capacity = "", nil, nil
	return c.Size() == zeroDeviceSize
}

// sameSimpleDevice is a cheap comparison for the common case of an
// unchanged plain device. It returns true only if both devices are simple
// and encode identically; false means "compare the encodings".
func sameSimpleDevice(d, prev *resourceapi.Device) bool {
	if d.Name != prev.Name || len(d.Attributes) != len(prev.Attributes) || len(d.Capacity) != len(prev.Capacity) {
		return false
	}
	for name, a := range d.Attributes {
		b, ok := prev.Attributes[name]
		if !ok || !sameAttribute(&a, &b) {
			return false
		}
	}
	for name, a := range d.Capacity {
		b, ok := prev.Capacity[name]
		if !ok || a.RequestPolicy != nil || b.RequestPolicy != nil ||
			a.Value.Format != b.Value.Format || a.Value.Cmp(b.Value) != 0 {
			return false
		}
	}
	return simpleDevice(d)
}

func samePtr[T comparable](a, b *T) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// sameAttribute compares every field of DeviceAttribute;
// TestSameAttributeKnowsEveryField fails when the type gains one.
func sameAttribute(a, b *resourceapi.DeviceAttribute) bool {
	return samePtr(a.IntValue, b.IntValue) && samePtr(a.BoolValue, b.BoolValue) &&
		samePtr(a.StringValue, b.StringValue) && samePtr(a.VersionValue, b.VersionValue) &&
		slices.Equal(a.IntValues, b.IntValues) && slices.Equal(a.BoolValues, b.BoolValues) &&
		slices.Equal(a.StringValues, b.StringValues) && slices.Equal(a.VersionValues, b.VersionValues)
}
