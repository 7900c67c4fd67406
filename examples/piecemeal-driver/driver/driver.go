package driver

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/cdi"
	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/inventory"
)

// MaxDevices bounds Config.NumDevices: one ResourceSlice holds 128 devices,
// and the simulation has no reason for more.
const MaxDevices = 128

// ErrInvalidConfig is matched by every error about a Config.
var ErrInvalidConfig = errors.New("invalid piecemeal-driver configuration")

// ErrClaimRefused is matched by the per-claim errors of a prepare the
// driver refuses: no devices of this driver, a device it does not have, a
// device marked unhealthy, or a device another claim holds (then the error
// also matches claimcache.ErrDeviceInUse and names that claim).
var ErrClaimRefused = errors.New("claim cannot be prepared")

// Config says where the driver keeps things and what it simulates.
type Config struct {
	// DriverName is the DRA driver name and the CDI vendor.
	DriverName string
	// NodeName names the node and the driver's one pool on it.
	NodeName string
	// NumDevices is how many GPUs to simulate (1..MaxDevices).
	NumDevices int
	// DevRoot holds the health markers: a file gpuN.unhealthy makes the
	// driver refuse GPU N.
	DevRoot string
	// HostDeviceNode is the real device node every GPU's container node
	// /dev/gpuN is made from (the CDI hostPath: the runtime copies its type
	// and major:minor); it must be a character or block device, or a
	// runtime refuses the container. Empty: DefaultHostDeviceNode.
	HostDeviceNode string
	// CDIDir is the container runtime's CDI spec directory (/var/run/cdi).
	CDIDir string
	// StateDir holds the record of prepared claims; it must survive
	// reboots (for example under /var/lib), unlike CDIDir.
	StateDir string
	// BootID is the current boot's ID (claimcache.ReadBootID on a node).
	BootID string
}

// DefaultHostDeviceNode backs the simulated GPUs unless Config says
// otherwise: it exists on every host, gives a workload nothing, and needs no
// privilege, where a node of the driver's own would need mknod (root).
const DefaultHostDeviceNode = "/dev/null"

func (c Config) hostDeviceNode() string {
	if c.HostDeviceNode == "" {
		return DefaultHostDeviceNode
	}
	return c.HostDeviceNode
}

// checkDeviceNode says why path cannot be the host side of a CDI device
// node: container runtimes stat it and refuse anything but a character or
// block device ("not a device node").
func checkDeviceNode(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("host device node: %w", err)
	}
	if fi.Mode()&os.ModeDevice == 0 {
		return fmt.Errorf("host device node %s is not a character or block device (mode %s)", path, fi.Mode())
	}
	return nil
}

func (c Config) validate() error {
	var problems []string
	if err := inventory.ValidateDriverName(c.DriverName); err != nil {
		problems = append(problems, fmt.Sprintf("driver name %q: %v", c.DriverName, err))
	} else if err := cdi.ValidateVendorName(c.DriverName); err != nil {
		problems = append(problems, fmt.Sprintf("driver name %q as a CDI vendor: %v", c.DriverName, err))
	}
	if c.NodeName == "" {
		problems = append(problems, "node name is empty")
	}
	if c.NumDevices < 1 || c.NumDevices > MaxDevices {
		problems = append(problems, fmt.Sprintf("number of devices %d is outside 1..%d", c.NumDevices, MaxDevices))
	}
	for _, dir := range []struct{ name, path string }{{"device root", c.DevRoot}, {"CDI directory", c.CDIDir}, {"state directory", c.StateDir}} {
		if !filepath.IsAbs(dir.path) {
			problems = append(problems, fmt.Sprintf("%s %q is not an absolute path", dir.name, dir.path))
		}
	}
	if !filepath.IsAbs(c.hostDeviceNode()) {
		problems = append(problems, fmt.Sprintf("host device node %q is not an absolute path", c.HostDeviceNode))
	} else if err := checkDeviceNode(c.hostDeviceNode()); err != nil {
		problems = append(problems, err.Error())
	}
	if strings.TrimSpace(c.BootID) == "" {
		problems = append(problems, "boot ID is empty")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	return nil
}

// Driver prepares and unprepares claims for the kubelet through the
// kubeletplugin helper. Its methods are safe for concurrent use: calls for
// one claim run one at a time (the record's per-claim lock,
// claimcache.Cache.WithClaim), calls for different claims run at the same
// time, so one pod's prepare never waits for another's.
//
// The CDI class is cdi.ClaimClass: devices are named
// "<driver>/claim=<claim UID>-gpu-N", one spec file per claim, with the
// claim UID in every device name so that no name is ever reused (runtimes
// may cache specs).
type Driver struct {
	cfg    Config
	specs  cdi.SpecDir
	record *claimcache.Cache
	// fatal ends Run; set by Run, nil when the driver is used alone.
	fatal func(error)
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New opens the driver's record in cfg.StateDir and cleans up after a
// crash: unprepares that were interrupted are finished, and CDI specs of
// claims the record does not know (written just before a crash) are
// removed. Close releases the record.
func New(ctx context.Context, cfg Config) (*Driver, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// DevRoot holds only the health markers; made here so that marking a
	// GPU is one touch.
	if err := os.MkdirAll(cfg.DevRoot, 0o755); err != nil {
		return nil, fmt.Errorf("device root: %w", err)
	}
	record, report, err := claimcache.Open(cfg.StateDir, cfg.BootID)
	if err != nil {
		return nil, fmt.Errorf("open the claim record: %w", err)
	}
	d := &Driver{cfg: cfg, specs: cdi.SpecDir{Path: cfg.CDIDir}, record: record}
	log := klog.FromContext(ctx)
	log.Info("Claim record restored", "claims", report.Entries, "rebootDetected", report.RebootDetected, "interrupted", len(report.Interrupted))
	for _, e := range report.Interrupted {
		// A claim left in PrepareStarted waits for the kubelet: its next
		// prepare finishes it, or its unprepare rolls it back.
		if e.State != claimcache.UnprepareStarted {
			continue
		}
		if err := d.unprepare(e.Claim.UID); err != nil {
			record.Close()
			return nil, fmt.Errorf("finish the interrupted unprepare of %s: %w", e.Claim, err)
		}
	}
	recorded := map[string]bool{}
	for _, e := range record.List() {
		recorded[e.Claim.UID] = true
	}
	removed, err := d.specs.Sweep(cfg.DriverName, cdi.ClaimClass, func(uid string) bool { return recorded[uid] })
	if err != nil {
		// Files the sweep could not read are left alone; the runtime
		// reports them, and they do not stop the driver.
		log.Error(err, "Sweeping CDI specs of unrecorded claims")
	}
	if len(removed) > 0 {
		log.Info("Removed CDI specs of unrecorded claims", "files", removed)
	}
	return d, nil
}

// Close releases the record; prepared claims stay recorded.
func (d *Driver) Close() error { return d.record.Close() }

// Inventory is what the driver publishes: one pool named after the node,
// with the simulated GPUs.
func (d *Driver) Inventory() inventory.Inventory {
	pool := inventory.Pool{Name: d.cfg.NodeName}
	for i := range d.cfg.NumDevices {
		pool.Devices = append(pool.Devices, resourceapi.Device{
			Name: deviceName(i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"index": {IntValue: ptr.To(int64(i))},
				"uuid":  {StringValue: ptr.To(d.deviceUUID(i))},
				"model": {StringValue: ptr.To("Piecemeal GPU")},
			},
		})
	}
	return inventory.Inventory{Pools: []inventory.Pool{pool}}
}

func deviceName(i int) string { return "gpu-" + strconv.Itoa(i) }

// deviceUUID is stable for a driver and index, as a real GPU's is across
// reboots.
func (d *Driver) deviceUUID(i int) string {
	sum := sha256.Sum256([]byte(d.cfg.DriverName + "/" + strconv.Itoa(i)))
	return fmt.Sprintf("GPU-%x", sum[:8])
}

// markerPath is the file whose existence marks GPU i unhealthy.
func (d *Driver) markerPath(i int) string {
	return filepath.Join(d.cfg.DevRoot, "gpu"+strconv.Itoa(i)+".unhealthy")
}

// EnvName is the environment variable that gives a container the UUID of
// GPU i of driver: GPU_DEVICE_<driver name in upper case, every character
// other than a letter or digit as "_">_<i>, per driver so that a container
// with devices of two drivers sees both.
func EnvName(driver string, i int) string {
	upper := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' {
			return r - 'a' + 'A'
		}
		if r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, driver)
	return "GPU_DEVICE_" + upper + "_" + strconv.Itoa(i)
}

// deviceIndex maps an allocated device back to the GPU, or fails for a
// device this driver does not have on this node.
func (d *Driver) deviceIndex(pool, device string) (int, error) {
	idx, ok := strings.CutPrefix(device, "gpu-")
	i, err := strconv.Atoi(idx)
	if pool != d.cfg.NodeName || !ok || err != nil || i < 0 || i >= d.cfg.NumDevices || deviceName(i) != device {
		return 0, fmt.Errorf("%w: device %s/%s is not one of the %d GPUs of pool %s", ErrClaimRefused, pool, device, d.cfg.NumDevices, d.cfg.NodeName)
	}
	return i, nil
}

// PrepareResourceClaims prepares each claim on its own: one failing claim
// does not fail the others. The helper has fetched the claims, checked
// their UIDs and that they are allocated.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		var devices []kubeletplugin.Device
		err := d.record.WithClaim(string(claim.UID), func() error {
			var err error
			devices, err = d.prepare(claim)
			return err
		})
		if err != nil {
			klog.FromContext(ctx).Error(err, "Prepare failed", "claim", klog.KObj(claim))
			err = fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		out[claim.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
	}
	return out, nil
}

func (d *Driver) prepare(claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	uid := string(claim.UID)
	if e, err := d.record.Get(uid); err == nil && e.PreparedInCurrentBoot() {
		// The kubelet asks again after its own restart; the devices are
		// still set up in this boot. Someone may have cleaned the CDI
		// directory meanwhile: the spec is rebuilt from the record.
		recorded := e.Drivers[d.cfg.DriverName]
		if err := d.ensureSpec(uid, recorded); err != nil {
			return nil, err
		}
		return helperDevices(recorded), nil
	}

	devices, err := d.allocatedDevices(claim)
	if err != nil {
		return nil, err
	}
	ref := claimcache.ClaimRef{Namespace: claim.Namespace, Name: claim.Name, UID: uid}
	// Before the hardware is touched: no other claim may hold a device
	// (prepared, being prepared or unprepared, or left by a crash in
	// between). The scheduler never hands out a device twice, but a
	// force-deleted pod's containers may still run with it; the driver is
	// the last line of defence. StartPrepare records the held devices.
	hold, err := d.record.Hold(ref, map[string][]claimcache.Device{d.cfg.DriverName: devices}, d.published)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrClaimRefused, err)
	}
	defer hold.Release() // from StartPrepare on, the record holds them
	if err := d.startPrepare(ref); err != nil {
		return nil, err
	}
	// A real driver sets up its hardware here. A failure leaves the claim
	// PrepareStarted: the kubelet's retry finishes it, an unprepare rolls
	// it back.
	spec, err := d.spec(devices)
	if err != nil {
		return nil, err
	}
	if _, err := d.specs.Write(spec, uid); err != nil {
		return nil, fmt.Errorf("write CDI spec: %w", err)
	}
	e, err := d.record.FinishPrepare(uid, map[string][]claimcache.Device{d.cfg.DriverName: devices})
	if err != nil {
		return nil, fmt.Errorf("record claim %s as prepared: %w", ref, err)
	}
	return helperDevices(e.Drivers[d.cfg.DriverName]), nil
}

// allocatedDevices checks the claim's devices of this driver and names
// their CDI devices.
func (d *Driver) allocatedDevices(claim *resourceapi.ResourceClaim) ([]claimcache.Device, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("%w: not allocated", ErrClaimRefused)
	}
	var devices []claimcache.Device
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != d.cfg.DriverName {
			continue
		}
		i, err := d.deviceIndex(r.Pool, r.Device)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(d.markerPath(i)); err == nil {
			return nil, fmt.Errorf("%w: device %s is unhealthy", ErrClaimRefused, r.Device)
		}
		name := string(claim.UID) + "-" + r.Device
		var shareID string
		if r.ShareID != nil {
			shareID = string(*r.ShareID)
			name += "-" + shareID
		}
		devices = append(devices, claimcache.Device{
			Pool: r.Pool, Device: r.Device, Requests: []string{r.Request}, ShareID: shareID, AdminAccess: r.AdminAccess != nil && *r.AdminAccess,
			CDIDeviceIDs: []string{cdi.QualifiedName(d.cfg.DriverName, cdi.ClaimClass, name)},
		})
	}
	if len(devices) == 0 {
		return nil, fmt.Errorf("%w: no devices of driver %s are allocated", ErrClaimRefused, d.cfg.DriverName)
	}
	return devices, nil
}

// published says how the driver publishes a device (claimcache.Hold asks
// before it holds the claim's devices): whether it is published with
// allowMultipleAllocations, so that claims with distinct share IDs may
// hold it at once. The simulated GPUs are published without it, and
// consume no counters (no partitions), so a GPU is one claim's at a time.
func (d *Driver) published(driver, pool, device string) claimcache.PublishedDevice {
	if driver != d.cfg.DriverName {
		return claimcache.PublishedDevice{}
	}
	for _, p := range d.Inventory().Pools {
		for _, dev := range p.Devices {
			if p.Name == pool && dev.Name == device {
				return claimcache.PublishedDevice{Listed: true, AllowMultipleAllocations: dev.AllowMultipleAllocations != nil && *dev.AllowMultipleAllocations}
			}
		}
	}
	return claimcache.PublishedDevice{}
}

// startPrepare records PrepareStarted, first clearing what stands in the
// way: the recorded claim of the same name with another UID (its pod was
// force-deleted and the claim recreated), or this claim's own interrupted
// unprepare.
func (d *Driver) startPrepare(ref claimcache.ClaimRef) error {
	_, err := d.record.StartPrepare(ref, "")
	var mismatch *claimcache.UIDMismatchError
	var transition *claimcache.TransitionError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &mismatch):
		old := mismatch.RecordedUID
		if err := d.record.WithClaim(old, func() error { return d.unprepare(old) }); err != nil {
			return fmt.Errorf("unprepare the earlier claim %s/%s with UID %s: %w", ref.Namespace, ref.Name, mismatch.RecordedUID, err)
		}
	case errors.As(err, &transition) && transition.From == claimcache.UnprepareStarted:
		if err := d.unprepare(ref.UID); err != nil {
			return fmt.Errorf("finish the interrupted unprepare of %s: %w", ref, err)
		}
	default:
		return fmt.Errorf("record claim %s as being prepared: %w", ref, err)
	}
	if _, err := d.record.StartPrepare(ref, ""); err != nil {
		return fmt.Errorf("record claim %s as being prepared: %w", ref, err)
	}
	return nil
}

// spec is the claim's CDI spec: per device, its device node and an
// environment variable with its UUID. It depends only on the devices, so
// the record is enough to write it again.
func (d *Driver) spec(devices []claimcache.Device) (*cdi.Spec, error) {
	// A spec naming a host node that is gone would be refused by the
	// runtime only when it starts the container; refuse the claim now.
	if err := checkDeviceNode(d.cfg.hostDeviceNode()); err != nil {
		return nil, err
	}
	spec := &cdi.Spec{Kind: d.cfg.DriverName + "/" + cdi.ClaimClass}
	for _, dev := range devices {
		i, err := d.deviceIndex(dev.Pool, dev.Device)
		if err != nil {
			return nil, err
		}
		if len(dev.CDIDeviceIDs) != 1 {
			return nil, fmt.Errorf("device %s has CDI IDs %v, want one", dev.Device, dev.CDIDeviceIDs)
		}
		_, _, name, err := cdi.ParseQualifiedName(dev.CDIDeviceIDs[0])
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", dev.Device, err)
		}
		spec.Devices = append(spec.Devices, cdi.Device{
			Name: name,
			ContainerEdits: cdi.ContainerEdits{
				Env:         []string{EnvName(d.cfg.DriverName, i) + "=" + d.deviceUUID(i)},
				DeviceNodes: []cdi.DeviceNode{{Path: "/dev/gpu" + strconv.Itoa(i), HostPath: d.cfg.hostDeviceNode()}},
			},
		})
	}
	spec.Version = cdi.MinimumVersion(spec)
	return spec, nil
}

// ensureSpec writes the claim's spec again when it is missing.
func (d *Driver) ensureSpec(uid string, devices []claimcache.Device) error {
	_, exists, err := d.specs.Lookup(d.cfg.DriverName, cdi.ClaimClass, uid)
	if err != nil {
		return fmt.Errorf("look for the CDI spec: %w", err)
	}
	if exists {
		return nil
	}
	spec, err := d.spec(devices)
	if err != nil {
		return err
	}
	if _, err := d.specs.Write(spec, uid); err != nil {
		return fmt.Errorf("write the missing CDI spec again: %w", err)
	}
	return nil
}

func helperDevices(devices []claimcache.Device) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(devices))
	for _, dev := range devices {
		hd := kubeletplugin.Device{Requests: dev.Requests, PoolName: dev.Pool, DeviceName: dev.Device, CDIDeviceIDs: dev.CDIDeviceIDs}
		if dev.ShareID != "" {
			hd.ShareID = ptr.To(types.UID(dev.ShareID))
		}
		out = append(out, hd)
	}
	return out
}

// UnprepareResourceClaims undoes claims from the record alone: the claim
// may be gone from the API server (a force-deleted pod), and the helper
// passes only UID, namespace and name. An unknown claim is done already.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		uid := string(c.UID)
		err := d.record.WithClaim(uid, func() error { return d.unprepare(uid) })
		if err != nil {
			klog.FromContext(ctx).Error(err, "Unprepare failed", "claim", c)
			err = fmt.Errorf("claim %s: %w", c, err)
		}
		out[c.UID] = err
	}
	return out, nil
}

func (d *Driver) unprepare(uid string) error {
	e, err := d.record.StartUnprepare(uid)
	if errors.Is(err, claimcache.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("record claim %s as being unprepared: %w", uid, err)
	}
	if err := d.teardown(e.Drivers[d.cfg.DriverName]); err != nil {
		return err
	}
	if err := d.specs.Remove(d.cfg.DriverName, cdi.ClaimClass, uid); err != nil {
		return fmt.Errorf("remove CDI spec: %w", err)
	}
	if err := d.record.Remove(uid); err != nil {
		return fmt.Errorf("drop claim %s from the record: %w", uid, err)
	}
	return nil
}

// teardown is where a real driver undoes its hardware setup, with what the
// record says was prepared; the simulation has nothing to undo.
func (d *Driver) teardown([]claimcache.Device) error { return nil }

// HandleError is called by the helper for errors of its gRPC servers.
// Recoverable ones are logged; anything else ends Run, whose caller exits
// so that the driver is restarted.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && d.fatal != nil {
		d.fatal(fmt.Errorf("%s: %w", msg, err))
	}
}

// WatchHealthStatus is not supported by the simulation; Run turns the
// helper's health service off, so the kubelet never asks.
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
