package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/examples/loop/loopdev"
	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
)

const driverVersion = "v0.1.0"

// Driver is the loop driver plugin: pluginmgr.Driver and
// pluginmgr.HealthReporter. It keeps no record of claims: which loop
// device holds which disk is the kernel's (sysfs), so a restarted plugin
// knows everything a killed one did.
type Driver struct {
	log hclog.Logger

	// mu serializes every change to the disks and their loop devices, so
	// that two calls never attach one disk twice.
	mu         sync.Mutex
	cfg        Config
	host       loopdev.Host
	nodeName   string
	configured chan struct{}
}

// New returns an unconfigured driver logging to log.
func New(log hclog.Logger) *Driver {
	return &Driver{log: log, configured: make(chan struct{})}
}

// Configure parses the configuration, creates the state directory and
// attaches every disk. A disk that cannot be attached is logged and
// reported unhealthy, not fatal: the driver still serves the others, and
// Prepare tries again and names the cause.
func (d *Driver) Configure(_ context.Context, nodeName string, raw []byte) error {
	cfg, err := ParseConfig(raw)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("stateDir: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.configured:
		return errors.New("configured twice")
	default:
	}
	d.cfg = cfg
	d.host = loopdev.Host{SysRoot: cfg.SysfsRoot, DevDir: cfg.DevDir, Control: cfg.LoopControl, Allowed: cfg.LoopDevices}
	d.nodeName = nodeName
	close(d.configured)
	for i := range *cfg.NumDevices {
		if dev, err := d.ensure(i); err != nil {
			d.log.Warn("disk not attached", "disk", diskName(i), "error", err)
		} else {
			d.log.Info("disk attached", "disk", diskName(i), "loop", d.host.NodePath(dev.Index))
		}
	}
	d.log.Info("configured", "node", nodeName, "driver", cfg.DriverName, "disks", *cfg.NumDevices, "size", cfg.Size, "stateDir", cfg.StateDir)
	return nil
}

func (d *Driver) waitConfigured(ctx context.Context) (Config, error) {
	select {
	case <-d.configured:
		return d.cfg, nil // never written after configured is closed
	case <-ctx.Done():
		return Config{}, ctx.Err()
	}
}

// Info describes the driver.
func (d *Driver) Info(ctx context.Context) (pluginmgr.Info, error) {
	cfg, err := d.waitConfigured(ctx)
	if err != nil {
		return pluginmgr.Info{}, err
	}
	return pluginmgr.Info{DriverName: cfg.DriverName, DriverVersion: driverVersion, Health: true}, nil
}

func diskName(i int) string { return "disk-" + strconv.Itoa(i) }

// diskIndex is N of "disk-N", if name is one of the configured disks.
func (d *Driver) diskIndex(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "disk-")
	i, err := strconv.Atoi(s)
	if !ok || err != nil || i < 0 || i >= *d.cfg.NumDevices || diskName(i) != name {
		return 0, false
	}
	return i, true
}

// file is disk i's backing file.
func (d *Driver) file(i int) string {
	return filepath.Join(d.cfg.StateDir, diskName(i)+".img")
}

// ensure makes disk i's backing file and attaches it, unless a loop device
// already holds it (the plugin attached it before a restart or a crash),
// and returns that device. A loop device holding the disk's unlinked file
// is detached first: the file is ours, and no name reaches its data any
// more. Called with d.mu held.
func (d *Driver) ensure(i int) (loopdev.Device, error) {
	file := d.file(i)
	live, stale, err := d.host.Held(file)
	if err != nil {
		return loopdev.Device{}, err
	}
	for _, dev := range stale {
		if err := d.host.DetachStale(dev.Index, file); err != nil {
			return loopdev.Device{}, fmt.Errorf("detaching %s, which holds the deleted %s: %w", d.host.NodePath(dev.Index), file, err)
		}
	}
	if len(live) > 0 {
		return live[0], nil
	}
	if err := createBacking(file, d.cfg.size.Value()); err != nil {
		return loopdev.Device{}, err
	}
	dev, err := d.host.Attach(file)
	if err != nil {
		return loopdev.Device{}, err
	}
	return dev, nil
}

// createBacking makes file of size bytes, or fixes the size of one a
// killed plugin left half made. Its blocks are allocated on first write.
func createBacking(file string, size int64) error {
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("creating backing file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("creating backing file %s: %w", file, err)
	}
	if fi.Size() != size {
		if err := f.Truncate(size); err != nil {
			return fmt.Errorf("sizing backing file %s: %w", file, err)
		}
	}
	return nil
}

// WatchDevices sends the disks as sysfs shows them, and again whenever
// that changes (a disk attached to another loop device, detached, resized).
func (d *Driver) WatchDevices(ctx context.Context, send func(inventory.Inventory) error) error {
	cfg, err := d.waitConfigured(ctx)
	if err != nil {
		return err
	}
	return poll(ctx, d.log, time.Duration(cfg.HealthPollInterval), d.inventory, send)
}

// WatchHealth sends every disk's health, and again whenever it changes.
func (d *Driver) WatchHealth(ctx context.Context, send func([]pluginmgr.DeviceHealth) error) error {
	cfg, err := d.waitConfigured(ctx)
	if err != nil {
		return err
	}
	return poll(ctx, d.log, time.Duration(cfg.HealthPollInterval), d.health, send)
}

// poll sends read's result at once and whenever it differs from the last
// one sent. sysfs has no event for a changed backing file, so it is read
// every interval. A read that fails (sysfs unreadable for a moment) is
// logged and tried again at the next tick: ending the stream would make
// the host restart the plugin for it.
func poll[T any](ctx context.Context, log hclog.Logger, interval time.Duration, read func() (T, error), send func(T) error) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last T
	first := true
	for {
		v, err := read()
		if err != nil {
			log.Warn("reading the loop devices", "error", err)
		} else if first || !reflect.DeepEqual(v, last) {
			if err := send(v); err != nil {
				return err
			}
			last, first = v, false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// state is what sysfs says about disk i: the live loop device holding it,
// if any, and one holding its deleted file, if any.
type state struct {
	live, deleted *loopdev.Device
}

func (d *Driver) states() ([]state, error) {
	out := make([]state, *d.cfg.NumDevices)
	for i := range out {
		live, stale, err := d.host.Held(d.file(i))
		if err != nil {
			return nil, err
		}
		if len(live) > 0 {
			out[i].live = &live[0]
		}
		if len(stale) > 0 {
			out[i].deleted = &stale[0]
		}
	}
	return out, nil
}

// inventory is one pool, named after the node, of every configured disk.
// Attributes of an attached disk come from its loop device in sysfs.
func (d *Driver) inventory() (inventory.Inventory, error) {
	states, err := d.states()
	if err != nil {
		return inventory.Inventory{}, err
	}
	pool := inventory.Pool{Name: d.nodeName}
	if pool.Name == "" {
		pool.Name = "node"
	}
	for i, st := range states {
		size := d.cfg.size.Value()
		attrs := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"index":         {IntValue: ptr.To(int64(i))},
			"driverVersion": {VersionValue: ptr.To(strings.TrimPrefix(driverVersion, "v"))},
		}
		if dev := st.live; dev != nil {
			size = dev.Size
			attrs["loopMinor"] = resourcev1.DeviceAttribute{IntValue: ptr.To(int64(dev.Minor))}
			attrs["readOnly"] = resourcev1.DeviceAttribute{BoolValue: ptr.To(dev.ReadOnly)}
		}
		pool.Devices = append(pool.Devices, resourcev1.Device{
			Name:       diskName(i),
			Attributes: attrs,
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
				"size": {Value: *resource.NewQuantity(size, resource.BinarySI)},
			},
		})
	}
	return inventory.Inventory{Pools: []inventory.Pool{pool}}, nil
}

// health is Healthy for a disk whose file a loop device holds, and
// Unhealthy, saying why, for one whose file was deleted or whose loop
// device was detached by someone else.
func (d *Driver) health() ([]pluginmgr.DeviceHealth, error) {
	states, err := d.states()
	if err != nil {
		return nil, err
	}
	pool := d.nodeName
	if pool == "" {
		pool = "node"
	}
	out := make([]pluginmgr.DeviceHealth, len(states))
	for i, st := range states {
		h := pluginmgr.DeviceHealth{Pool: pool, Device: diskName(i), Status: pluginmgr.Healthy}
		switch {
		case st.live != nil:
			h.Message = "attached to " + d.host.NodePath(st.live.Index)
		case st.deleted != nil:
			h.Status = pluginmgr.Unhealthy
			h.Message = fmt.Sprintf("backing file %s was deleted while attached to %s", d.file(i), d.host.NodePath(st.deleted.Index))
		default:
			h.Status = pluginmgr.Unhealthy
			h.Message = fmt.Sprintf("no loop device holds backing file %s (detached by someone else, or never attached)", d.file(i))
		}
		out[i] = h
	}
	return out, nil
}

// Prepare attaches each allocated disk, or finds it attached, and hands
// the container its loop device node: type b, major 7, the device's minor,
// read-write. A disk that fails fails its claim alone, and leaves every
// disk already attached as it was.
func (d *Driver) Prepare(ctx context.Context, claims []pluginmgr.Claim) ([]pluginmgr.PrepareResult, error) {
	cfg, err := d.waitConfigured(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]pluginmgr.PrepareResult, len(claims))
	for i, c := range claims {
		devices, err := d.prepareClaim(cfg, c)
		out[i] = pluginmgr.PrepareResult{ClaimUID: c.UID, Devices: devices, Err: err}
		if err != nil {
			out[i].Devices = nil
			d.log.Warn("prepare failed", "claim", c.UID, "error", err)
		}
	}
	return out, nil
}

func (d *Driver) prepareClaim(cfg Config, c pluginmgr.Claim) ([]pluginmgr.PreparedDevice, error) {
	var devices []pluginmgr.PreparedDevice
	for _, r := range c.Results {
		if r.Driver != cfg.DriverName {
			continue
		}
		i, ok := d.diskIndex(r.Device)
		if !ok {
			return nil, fmt.Errorf("device %q is not one of this driver's %d disks", r.Device, *cfg.NumDevices)
		}
		d.mu.Lock()
		dev, err := d.ensure(i)
		d.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", r.Device, err)
		}
		devices = append(devices, d.prepared(cfg, r, i, dev))
	}
	if len(devices) == 0 {
		return nil, fmt.Errorf("claim %s/%s has no devices of driver %s", c.Namespace, c.Name, cfg.DriverName)
	}
	return devices, nil
}

// ContainerPath is where disk i appears in a container.
func ContainerPath(cfg Config, i int) string {
	return filepath.Join(cfg.ContainerDevDir, diskName(i))
}

// EnvName is the variable that gives a container disk i's path:
// LOOP_DEVICE_<driver name in upper case, other than letters and digits
// as "_">_<i>, per driver so that two instances never collide.
func EnvName(driverName string, i int) string {
	var b strings.Builder
	b.WriteString("LOOP_DEVICE_")
	for _, r := range strings.ToUpper(driverName) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	b.WriteString("_" + strconv.Itoa(i))
	return b.String()
}

// statusData is the opaque data of a prepared disk in the claim's status.
type statusData struct {
	LoopDevice string `json:"loopDevice"`
	Size       int64  `json:"size"`
}

func (d *Driver) prepared(cfg Config, r resourcev1.DeviceRequestAllocationResult, i int, dev loopdev.Device) pluginmgr.PreparedDevice {
	path := ContainerPath(cfg, i)
	data, _ := json.Marshal(statusData{LoopDevice: d.host.NodePath(dev.Index), Size: dev.Size}) // cannot fail
	return pluginmgr.PreparedDevice{
		Pool: r.Pool, Device: r.Device, Requests: []string{r.Request},
		Edits: pluginmgr.ContainerEdits{
			Env: []string{EnvName(cfg.DriverName, i) + "=" + path},
			DeviceNodes: []pluginmgr.DeviceNode{{
				Path: path, HostPath: d.host.NodePath(dev.Index),
				// The numbers are the device's own, not taken from a stat
				// of HostPath by the runtime: they are what the device
				// cgroup rule allows.
				Type: "b", Major: int64(dev.Major), Minor: int64(dev.Minor),
				Permissions: "rw",
			}},
		},
		Status: &resourcev1.AllocatedDeviceStatus{
			Conditions: []metav1.Condition{{
				Type: "Ready", Status: metav1.ConditionTrue, Reason: "Prepared",
				Message: "the disk is attached to a loop device", LastTransitionTime: metav1.Now(),
			}},
			Data: &runtime.RawExtension{Raw: data},
		},
	}
}

// Unprepare zeroes each disk of the claims, so that the next claim reads
// zeros (except a disk prepared for admin access, which its owner may still
// be using), and detaches nothing: the loop device stays attached for the next
// claim. The disk is found by its backing file, never by the loop device
// number recorded at Prepare, which may hold someone else's file by now.
func (d *Driver) Unprepare(ctx context.Context, claims []pluginmgr.PreparedClaim) ([]pluginmgr.UnprepareResult, error) {
	if _, err := d.waitConfigured(ctx); err != nil {
		return nil, err
	}
	out := make([]pluginmgr.UnprepareResult, len(claims))
	for i, c := range claims {
		out[i] = pluginmgr.UnprepareResult{ClaimUID: c.UID}
		for _, dev := range c.Devices {
			idx, ok := d.diskIndex(dev.Device)
			if !ok {
				continue // not ours: nothing to undo
			}
			if dev.AdminAccess {
				// A claim that only watched the disk next to its owner:
				// the owner's data is not ours to zero.
				continue
			}
			d.mu.Lock()
			err := d.zero(idx)
			d.mu.Unlock()
			if err != nil {
				out[i].Err = fmt.Errorf("device %s: %w", dev.Device, err)
				d.log.Warn("unprepare failed", "claim", c.UID, "error", out[i].Err)
				break
			}
		}
	}
	return out, nil
}

// zero zeroes disk i through every live loop device holding it, or, when
// none does, its file. A disk whose file is gone has nothing to zero.
// Called with d.mu held.
func (d *Driver) zero(i int) error {
	file := d.file(i)
	live, _, err := d.host.Held(file)
	if err != nil {
		return err
	}
	zeroed := false
	for _, dev := range live {
		if err := d.host.Zero(dev.Index, file); err != nil {
			return err
		}
		zeroed = true
	}
	if zeroed {
		return nil
	}
	err = loopdev.ZeroFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// DetachAll detaches every loop device holding a disk of stateDir (every
// disk-N.img there, deleted or not): what an operator runs after removing
// the driver from a node, since the plugin itself never detaches, so that
// the disks stay with the pods that use them across plugin restarts.
func DetachAll(stateDir string) error {
	// The tag is made from the absolute path the plugin was configured with.
	stateDir, err := filepath.Abs(stateDir)
	if err != nil {
		return err
	}
	var host loopdev.Host
	var errs []error
	for i := range maxDevices {
		file := filepath.Join(stateDir, diskName(i)+".img")
		live, stale, err := host.Held(file)
		if err != nil {
			return err
		}
		for _, dev := range live {
			errs = append(errs, host.Detach(dev.Index, file))
		}
		for _, dev := range stale {
			errs = append(errs, host.DetachStale(dev.Index, file))
		}
	}
	return errors.Join(errs...)
}
