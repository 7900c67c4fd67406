// Command brokenplugin breaks the plugin contract on purpose, for the
// conformance kit's own tests: an empty version, a malformed config kind, invalid devices,
// a Prepare that answers differently every time, refuses admin access and
// answers two shares of a device as one, and an Unprepare that rejects
// claims it does not know.
package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
)

type broken struct {
	calls    atomic.Int64
	prepared map[string]bool
}

func (b *broken) Info(context.Context) (pluginmgr.Info, error) {
	return pluginmgr.Info{DriverName: "broken.example.com", OpaqueConfigKinds: []string{"NotAKind"}}, nil
}

func (b *broken) Configure(context.Context, string, []byte) error { return nil }

func (b *broken) WatchDevices(ctx context.Context, send func(inventory.Inventory) error) error {
	attrs := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		"both":                              {IntValue: ptr.To(int64(1)), StringValue: ptr.To("one")},
		"bad.domain_/x":                     {BoolValue: ptr.To(true)},
		"version":                           {VersionValue: ptr.To("1.2")},
		"this_identifier_is_far_too_long_x": {IntValue: ptr.To(int64(1))},
	}
	for i := range 30 {
		attrs[resourcev1.QualifiedName(fmt.Sprintf("a%d", i))] = resourcev1.DeviceAttribute{IntValue: ptr.To(int64(i))}
	}
	err := send(inventory.Inventory{Pools: []inventory.Pool{{
		Name: "node",
		Devices: []resourcev1.Device{
			{Name: "GPU_0", Attributes: attrs},
			{Name: "gpu-1", ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: "missing"}}},
			{Name: "gpu-1"},
			{Name: "gpu-2", AllowMultipleAllocations: ptr.To(true)},
		},
	}}})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func (b *broken) Prepare(_ context.Context, claims []pluginmgr.Claim) ([]pluginmgr.PrepareResult, error) {
	out := make([]pluginmgr.PrepareResult, len(claims))
	for i, c := range claims {
		n := b.calls.Add(1)
		b.prepared[string(c.UID)] = true
		if pluginmgr.AdminAccess(c.Results[0]) {
			out[i] = pluginmgr.PrepareResult{ClaimUID: c.UID, Err: errors.New("device " + c.Results[0].Device + " is in use")}
			continue
		}
		out[i] = pluginmgr.PrepareResult{ClaimUID: c.UID, Devices: []pluginmgr.PreparedDevice{{
			Pool: c.Results[0].Pool, Device: c.Results[0].Device, Requests: []string{c.Results[0].Request},
			Edits: pluginmgr.ContainerEdits{Env: []string{fmt.Sprintf("CALL=%d", n), "NOEQUALS"}, DeviceNodes: []pluginmgr.DeviceNode{{Path: "dev/gpu0"}}},
			Status: &resourcev1.AllocatedDeviceStatus{
				Conditions:  []metav1.Condition{{Type: "Ready", Status: "Yes"}},
				Data:        &runtime.RawExtension{Raw: []byte(`[1]`)},
				NetworkData: &resourcev1.NetworkDeviceData{IPs: []string{"10.0.0.1"}},
			},
		}}}
	}
	return out, nil
}

func (b *broken) Unprepare(_ context.Context, claims []pluginmgr.PreparedClaim) ([]pluginmgr.UnprepareResult, error) {
	out := make([]pluginmgr.UnprepareResult, len(claims))
	for i, c := range claims {
		out[i].ClaimUID = c.UID
		if !b.prepared[string(c.UID)] {
			out[i].Err = errors.New("unknown claim " + strings.ToUpper(string(c.UID)))
		}
	}
	return out, nil
}

func main() {
	pluginmgr.Serve(&broken{prepared: map[string]bool{}})
}
