// Command hellodriver is the README's "write your first driver" walkthrough:
// one fake device, prepared by handing the container an environment
// variable.
package main

import (
	"context"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
)

type helloDriver struct{ node string }

func (d *helloDriver) Configure(_ context.Context, nodeName string, _ []byte) error {
	d.node = nodeName
	return nil
}

func (d *helloDriver) Info(context.Context) (pluginmgr.Info, error) {
	return pluginmgr.Info{DriverName: "hello.example.com", DriverVersion: "v0.1.0"}, nil
}

func (d *helloDriver) WatchDevices(ctx context.Context, send func(inventory.Inventory) error) error {
	inv := inventory.Inventory{Pools: []inventory.Pool{{
		Name: "pool-a",
		Devices: []resourcev1.Device{{
			Name: "hello-0",
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"greeting": {StringValue: ptr.To("hello")},
			},
		}},
	}}}
	if err := send(inv); err != nil {
		return err
	}
	<-ctx.Done() // nothing ever changes
	return nil
}

func (d *helloDriver) Prepare(_ context.Context, claims []pluginmgr.Claim) ([]pluginmgr.PrepareResult, error) {
	out := make([]pluginmgr.PrepareResult, len(claims))
	for i, c := range claims {
		out[i].ClaimUID = c.UID
		for _, r := range c.Results {
			out[i].Devices = append(out[i].Devices, pluginmgr.PreparedDevice{
				Pool: r.Pool, Device: r.Device, Requests: []string{r.Request},
				Edits: pluginmgr.ContainerEdits{Env: []string{"HELLO_DEVICE=" + r.Device}},
			})
		}
	}
	return out, nil
}

func (d *helloDriver) Unprepare(_ context.Context, claims []pluginmgr.PreparedClaim) ([]pluginmgr.UnprepareResult, error) {
	out := make([]pluginmgr.UnprepareResult, len(claims))
	for i, c := range claims {
		out[i].ClaimUID = c.UID // nothing to undo
	}
	return out, nil
}

func main() {
	pluginmgr.Serve(&helloDriver{})
}
