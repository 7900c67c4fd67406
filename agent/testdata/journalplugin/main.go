// Command journalplugin is a driver plugin for the agent's tests that
// appends every Prepare and Unprepare it receives to a file, so that a test
// can tell exactly which claims and devices reached the plugin process.
//
// Configuration: driverName, numDevices (devices gpu-0 … in pool pool-a),
// callLog (the file appended to: "prepare <uid> <pool>/<device>..." and
// "unprepare <uid> <pool>/<device>...", one line per claim), and optionally
// failUnprepare, a file whose existence makes every Unprepare fail (after
// the call is logged, as "unprepare-failed ..."), statelessPrepare,
// reported in Info, and allowMultipleAllocations, published on every
// device.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
)

type config struct {
	DriverName string `json:"driverName"`
	NumDevices int    `json:"numDevices"`
	CallLog    string `json:"callLog"`
	// FailUnprepare names a file; while it exists, Unprepare fails.
	FailUnprepare    string `json:"failUnprepare"`
	StatelessPrepare bool   `json:"statelessPrepare"`
	// AllowMultipleAllocations is published on every device.
	AllowMultipleAllocations bool `json:"allowMultipleAllocations"`
}

type driver struct {
	cfg config
	mu  sync.Mutex
}

func (d *driver) Configure(_ context.Context, _ string, raw []byte) error {
	if err := json.Unmarshal(raw, &d.cfg); err != nil {
		return err
	}
	if d.cfg.DriverName == "" || d.cfg.CallLog == "" || d.cfg.NumDevices < 1 {
		return fmt.Errorf("driverName, callLog and numDevices are required, got %s", raw)
	}
	return nil
}

func (d *driver) Info(context.Context) (pluginmgr.Info, error) {
	return pluginmgr.Info{DriverName: d.cfg.DriverName, DriverVersion: "v0.0.0-test", StatelessPrepare: d.cfg.StatelessPrepare}, nil
}

func (d *driver) WatchDevices(ctx context.Context, send func(inventory.Inventory) error) error {
	pool := inventory.Pool{Name: "pool-a"}
	for i := range d.cfg.NumDevices {
		dev := resourcev1.Device{Name: fmt.Sprintf("gpu-%d", i)}
		if d.cfg.AllowMultipleAllocations {
			dev.AllowMultipleAllocations = &d.cfg.AllowMultipleAllocations
		}
		pool.Devices = append(pool.Devices, dev)
	}
	if err := send(inventory.Inventory{Pools: []inventory.Pool{pool}}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func (d *driver) Prepare(_ context.Context, claims []pluginmgr.Claim) ([]pluginmgr.PrepareResult, error) {
	out := make([]pluginmgr.PrepareResult, len(claims))
	for i, c := range claims {
		out[i].ClaimUID = c.UID
		var devs []string
		for _, r := range c.Results {
			out[i].Devices = append(out[i].Devices, pluginmgr.PreparedDevice{
				Pool: r.Pool, Device: r.Device, Requests: []string{r.Request},
				Edits: pluginmgr.ContainerEdits{Env: []string{"TEST_DEVICE=" + r.Device}},
			})
			devs = append(devs, r.Pool+"/"+r.Device)
		}
		if err := d.record("prepare", string(c.UID), devs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (d *driver) Unprepare(_ context.Context, claims []pluginmgr.PreparedClaim) ([]pluginmgr.UnprepareResult, error) {
	out := make([]pluginmgr.UnprepareResult, len(claims))
	for i, c := range claims {
		out[i].ClaimUID = c.UID
		var devs []string
		for _, dev := range c.Devices {
			devs = append(devs, dev.Pool+"/"+dev.Device)
		}
		if _, err := os.Stat(d.cfg.FailUnprepare); d.cfg.FailUnprepare != "" && err == nil {
			if err := d.record("unprepare-failed", string(c.UID), devs); err != nil {
				return nil, err
			}
			out[i].Err = fmt.Errorf("unprepare of %s failed on purpose: %s exists", c.UID, d.cfg.FailUnprepare)
			continue
		}
		if err := d.record("unprepare", string(c.UID), devs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// record appends one line, durably enough for a test that reads it after
// the call returned.
func (d *driver) record(op, uid string, devices []string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	f, err := os.OpenFile(d.cfg.CallLog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s %s %s\n", op, uid, strings.Join(devices, " "))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func main() {
	pluginmgr.Serve(&driver{})
}
