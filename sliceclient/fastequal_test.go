package sliceclient

import (
	"bytes"
	"github.com/dranode/dranode/inventory/inventorytest"
	"reflect"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestSameAttributeKnowsEveryField(t *testing.T) {
	if n := reflect.TypeFor[resourceapi.DeviceAttribute]().NumField(); n != 8 {
		t.Fatalf("DeviceAttribute has %d fields; sameAttribute compares 8: update it", n)
	}
	if n := reflect.TypeFor[resourceapi.DeviceCapacity]().NumField(); n != 2 {
		t.Fatalf("DeviceCapacity has %d fields; sameSimpleDevice knows 2: update it", n)
	}
}

func TestSameSimpleDeviceAgreesWithEncoding(t *testing.T) {
	base := inventorytest.Device("dev-0", "a100")
	tests := []struct {
		name   string
		change func(d *resourceapi.Device)
	}{
		{"unchanged", func(*resourceapi.Device) {}},
		{"string value", func(d *resourceapi.Device) {
			d.Attributes["model"] = resourceapi.DeviceAttribute{StringValue: ptrTo("h100")}
		}},
		{"value type", func(d *resourceapi.Device) {
			d.Attributes["model"] = resourceapi.DeviceAttribute{VersionValue: ptrTo("1.0.0")}
		}},
		{"attribute added", func(d *resourceapi.Device) { d.Attributes["x"] = resourceapi.DeviceAttribute{BoolValue: ptrTo(false)} }},
		{"capacity value", func(d *resourceapi.Device) {
			d.Capacity["memory"] = resourceapi.DeviceCapacity{Value: resource.MustParse("8Gi")}
		}},
		{"capacity format only", func(d *resourceapi.Device) {
			d.Capacity["memory"] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(16<<30, resource.DecimalSI)}
		}},
		{"same capacity written differently", func(d *resourceapi.Device) {
			d.Capacity["memory"] = resourceapi.DeviceCapacity{Value: resource.MustParse("16384Mi")}
		}},
		{"taint", func(d *resourceapi.Device) {
			d.Taints = []resourceapi.DeviceTaint{{Key: "k", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		}},
		{"binds to node", func(d *resourceapi.Device) { d.BindsToNode = ptrTo(true) }},
		{"request policy", func(d *resourceapi.Device) {
			d.Capacity["memory"] = resourceapi.DeviceCapacity{Value: resource.MustParse("16Gi"), RequestPolicy: &resourceapi.CapacityRequestPolicy{}}
		}},
		{"empty list same as none", func(d *resourceapi.Device) { d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{} }},
	}
	prev := encodeDevice(&base)
	if !prev.simple {
		t.Fatal("plain test device not simple")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := *base.DeepCopy()
			tt.change(&d)
			full, err := d.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			sameBytes := bytes.Equal(full, prev.full)
			if sameSimpleDevice(&d, prev.dev) && !sameBytes {
				t.Fatal("cheap comparison says equal, encodings differ")
			}
			var scratch []byte
			got := encodeDeviceAgain(&d, &prev, &scratch)
			if !bytes.Equal(got.full, full) {
				t.Fatal("encodeDeviceAgain returned another device's encoding")
			}
		})
	}
}
