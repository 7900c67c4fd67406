package testdriver

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
)

// Config is the test driver's config section.
type Config struct {
	Devices int `json:"devices"`
	// BlockDir: while <BlockDir>/block exists, Prepare writes
	// <BlockDir>/prepare-started and waits for the file to go away.
	BlockDir string `json:"blockDir"`
	// ExitAfterInventory makes the process exit right after its first
	// inventory, every time it starts.
	ExitAfterInventory bool `json:"exitAfterInventory"`
	// DriverName overrides the reported driver name (to test Info checks).
	DriverName string `json:"driverName"`
	// HangIn names a call ("Configure" or "Info") that never returns, not
	// even when the host gives up on it, as a stuck driver would; it writes
	// <BlockDir>/<call>-started first.
	HangIn string `json:"hangIn"`
	// PanicIn names a call ("Prepare") that panics, which ends the
	// process with the Go runtime's panic message on stderr.
	PanicIn string `json:"panicIn"`
	// Status makes Prepare report a status (KEP-4817) for every device: a
	// Ready condition and the device name as opaque data.
	Status bool `json:"status"`
	// StatelessPrepare is reported in Info as it is.
	StatelessPrepare bool `json:"statelessPrepare"`
	// Shared publishes dev0 with allowMultipleAllocations and a memory
	// capacity shares consume.
	Shared bool `json:"shared"`
}

// Driver is the test driver; the zero value is ready for Configure.
type Driver struct {
	// Log receives the driver's log; nil discards it.
	Log hclog.Logger
	cfg Config
}

func (d *Driver) Info(context.Context) (pluginmgr.Info, error) {
	d.hangIf("Info")
	name := "test.dranode.dev"
	if d.cfg.DriverName != "" {
		name = d.cfg.DriverName
	}
	return pluginmgr.Info{DriverName: name, DriverVersion: "v0.0.1", Health: true, StatelessPrepare: d.cfg.StatelessPrepare}, nil
}

func (d *Driver) Configure(_ context.Context, _ string, raw []byte) error {
	d.cfg = Config{Devices: 2}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &d.cfg); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	if d.Log != nil {
		d.Log.Info("configured", "devices", d.cfg.Devices)
		d.Log.Debug("configuration details", "blockDir", d.cfg.BlockDir)
	}
	d.hangIf("Configure")
	return nil
}

// markStarted writes this process's PID to <BlockDir>/name, whole: the
// tests read the file as soon as it exists, so it appears by a rename, never
// empty or half-written.
func (d *Driver) markStarted(name string) error {
	f, err := os.CreateTemp(d.cfg.BlockDir, "."+name+"-*")
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(f, os.Getpid())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(d.cfg.BlockDir, name))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// hangIf blocks forever when the configuration says call hangs.
func (d *Driver) hangIf(call string) {
	if d.cfg.HangIn != call {
		return
	}
	if err := d.markStarted(call + "-started"); err != nil {
		panic(err)
	}
	select {}
}

func (d *Driver) WatchDevices(ctx context.Context, send func(inventory.Inventory) error) error {
	pool := inventory.Pool{Name: "node"}
	for i := range d.cfg.Devices {
		pool.Devices = append(pool.Devices, resourcev1.Device{
			Name: fmt.Sprintf("dev%d", i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"index": {IntValue: ptr.To(int64(i))},
			},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
				"memory": {Value: resource.MustParse("1Gi")},
			},
		})
	}
	if d.cfg.Shared && len(pool.Devices) > 0 {
		dev := &pool.Devices[0]
		dev.AllowMultipleAllocations = ptr.To(true)
		dev.Capacity["memory"] = resourcev1.DeviceCapacity{
			Value:         resource.MustParse("1Gi"),
			RequestPolicy: &resourcev1.CapacityRequestPolicy{Default: ptr.To(resource.MustParse("256Mi"))},
		}
	}
	if err := send(inventory.Inventory{Pools: []inventory.Pool{pool}}); err != nil {
		return err
	}
	if d.cfg.ExitAfterInventory {
		os.Exit(3)
	}
	<-ctx.Done()
	return nil
}

func (d *Driver) WatchHealth(ctx context.Context, send func([]pluginmgr.DeviceHealth) error) error {
	if err := send([]pluginmgr.DeviceHealth{{Pool: "node", Device: "dev0", Status: pluginmgr.Healthy}}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func (d *Driver) Prepare(ctx context.Context, claims []pluginmgr.Claim) ([]pluginmgr.PrepareResult, error) {
	if d.cfg.PanicIn == "Prepare" {
		panic("testdriver: panic requested in Prepare")
	}
	if d.cfg.BlockDir != "" {
		block := filepath.Join(d.cfg.BlockDir, "block")
		if _, err := os.Stat(block); err == nil {
			if err := d.markStarted("prepare-started"); err != nil {
				return nil, err
			}
			for {
				if _, err := os.Stat(block); errors.Is(err, os.ErrNotExist) {
					break
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
		}
	}
	out := make([]pluginmgr.PrepareResult, len(claims))
	for i, c := range claims {
		out[i].ClaimUID = c.UID
		if len(c.Results) == 0 {
			out[i].Err = errors.New("no allocation results")
			continue
		}
		for _, r := range c.Results {
			env := []string{"TEST_DEVICE=" + r.Device}
			if pluginmgr.AdminAccess(r) {
				env = append(env, "TEST_ADMIN_ACCESS=true")
			}
			if id := pluginmgr.ShareID(r); id != "" {
				env = append(env, "TEST_SHARE="+id)
			}
			out[i].Devices = append(out[i].Devices, pluginmgr.PreparedDevice{
				Pool: r.Pool, Device: r.Device, Requests: []string{r.Request}, ShareID: pluginmgr.ShareID(r),
				Edits: pluginmgr.ContainerEdits{
					Env:         env,
					DeviceNodes: []pluginmgr.DeviceNode{{Path: "/dev/" + r.Device, FileMode: ptr.To(uint32(0o660))}},
				},
				Status: d.status(r.Device),
			})
		}
	}
	return out, nil
}

// status is the device's status when the configuration asks for one.
func (d *Driver) status(device string) *resourcev1.AllocatedDeviceStatus {
	if !d.cfg.Status {
		return nil
	}
	return &resourcev1.AllocatedDeviceStatus{
		Conditions: []metav1.Condition{{
			Type: "Ready", Status: metav1.ConditionTrue, Reason: "Prepared",
			LastTransitionTime: metav1.NewTime(time.Unix(1700000000, 0).UTC()),
		}},
		Data:        &runtime.RawExtension{Raw: []byte(`{"device":"` + device + `"}`)},
		NetworkData: &resourcev1.NetworkDeviceData{InterfaceName: "net-" + device, IPs: []string{"10.9.8.7/24"}},
	}
}

func (d *Driver) Unprepare(_ context.Context, claims []pluginmgr.PreparedClaim) ([]pluginmgr.UnprepareResult, error) {
	out := make([]pluginmgr.UnprepareResult, len(claims))
	for i, c := range claims {
		out[i].ClaimUID = c.UID
	}
	return out, nil
}

// Main serves the driver, with the handshake fault -mode names.
func Main() {
	mode := flag.String("mode", "", "handshake fault: stdout, hang, wrong-cookie, v2-only")
	flag.Parse()
	d := &Driver{Log: pluginmgr.Logger("testdriver")}
	switch *mode {
	case "":
		pluginmgr.Serve(d)
	case "stdout":
		fmt.Println("starting up, hello")
		pluginmgr.Serve(d)
	case "hang":
		// Never handshake, until killed. Not a bare select{}: in a binary
		// without cgo (how tests build it) the runtime reports that as a
		// deadlock and exits; a goroutine waiting for a signal is not one.
		wait := make(chan os.Signal, 1)
		signal.Notify(wait, syscall.SIGTERM)
		<-wait
	case "wrong-cookie":
		hs := pluginmgr.Handshake
		hs.MagicCookieValue = "someone else's plugin"
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig:  hs,
			VersionedPlugins: map[int]plugin.PluginSet{1: pluginmgr.PluginSet(d)},
			GRPCServer:       plugin.DefaultGRPCServer,
		})
	case "v2-only":
		hs := pluginmgr.Handshake
		hs.ProtocolVersion = 2
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig:  hs,
			VersionedPlugins: map[int]plugin.PluginSet{2: pluginmgr.PluginSet(d)},
			GRPCServer:       plugin.DefaultGRPCServer,
		})
	default:
		fmt.Fprintf(os.Stderr, "unknown -mode %q\n", *mode)
		os.Exit(2)
	}
}
