package pluginmgr

import (
	"context"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dranode/dranode/inventory"
)

// Info describes a driver plugin.
type Info struct {
	// DriverName is the DRA driver name, a DNS subdomain such as
	// "gpu.example.com".
	DriverName string
	// DriverVersion is the plugin's own version, for logs and status.
	DriverVersion string
	// Health says that the driver implements HealthReporter.
	Health bool
	// OpaqueConfigKinds lists the "apiVersion/Kind" strings of the opaque
	// device configuration the driver accepts, e.g. "gpu.example.com/v1/GpuConfig".
	OpaqueConfigKinds []string
	// StatelessPrepare says that Prepare changes nothing on the node that
	// Unprepare would have to undo: it only computes the container edits
	// (the example gpu plugin), and Unprepare has nothing to do. An agent
	// then records a claim once, when it is prepared, and drops the record
	// at once on Unprepare: one durable commit each instead of two, since
	// a crash in between leaves nothing on the node to find. A plugin that
	// attaches, binds, programs or allocates anything per claim (the loop
	// plugin) must leave it false.
	StatelessPrepare bool
}

// Claim is one ResourceClaim to prepare, reduced to what a driver needs.
type Claim struct {
	UID       types.UID
	Namespace string
	Name      string
	// Results are the claim's allocation results for this driver only.
	// Two fields change what a driver may do with a result's device:
	// AdminAccess (true: grant monitoring-only access, without claiming,
	// resetting or reconfiguring the device, which other claims may be
	// using at the same time; see AdminAccess) and ShareID (set: the
	// device is published with AllowMultipleAllocations and this is one
	// share of it, with ConsumedCapacity saying how much; carve that
	// share and answer with PreparedDevice.ShareID; see ShareID).
	Results []resourcev1.DeviceRequestAllocationResult
	// Configs are the opaque configurations for this driver that apply to
	// the claim, class configurations first (the order the API defines).
	Configs []resourcev1.DeviceAllocationConfiguration
}

// AdminAccess reports whether an allocation result asks for admin access
// (resource.k8s.io/v1, GA in Kubernetes 1.36, beta and on by default in
// 1.34 and 1.35): the device may be in use by other claims, and the
// driver grants monitoring-only access without taking it over.
func AdminAccess(r resourcev1.DeviceRequestAllocationResult) bool {
	return r.AdminAccess != nil && *r.AdminAccess
}

// ShareID is an allocation result's share ID, "" when the device is not
// shared (consumable capacity, beta and on by default in Kubernetes 1.36;
// alpha, off by default, in 1.34 and 1.35).
func ShareID(r resourcev1.DeviceRequestAllocationResult) string {
	if r.ShareID == nil {
		return ""
	}
	return string(*r.ShareID)
}

// PrepareResult is the outcome of preparing one claim: either Devices or Err.
type PrepareResult struct {
	ClaimUID types.UID
	Devices  []PreparedDevice
	// Err fails this claim only; the other claims of the batch are not
	// affected.
	Err error
}

// PreparedDevice is one prepared device with the container edits that give
// a container access to it.
type PreparedDevice struct {
	Pool     string
	Device   string
	Requests []string
	Edits    ContainerEdits
	// Status, when not nil, is what the host publishes for this device in
	// the ResourceClaim's status.devices (KEP-4817): the driver sets
	// Conditions, Data and NetworkData; the host fills in Driver, Pool,
	// Device and ShareID, so whatever the driver puts there is ignored.
	// Nil publishes nothing. Only Prepare results carry it; Unprepare hands
	// devices back without it.
	Status *resourcev1.AllocatedDeviceStatus
	// ShareID is the share of the device this entry is for: the ShareID
	// of the allocation result it answers, set when the device is
	// published with AllowMultipleAllocations (consumable capacity). A
	// driver carves a share per ShareID and copies it here, so that the
	// host gives each share its own CDI device; it is handed back on
	// Unprepare, so that the driver knows which share to release. Empty
	// for a device that is not shared.
	ShareID string
	// AdminAccess says that the allocation result asked for admin access:
	// monitoring-only access to a device that other claims may be using
	// at the same time. The host sets it on Unprepare, from its record, so
	// that a driver does not reset, zero or release a device it never
	// owned; in a Prepare answer it is ignored (the host takes it from the
	// allocation, and the driver reads Claim.Results).
	AdminAccess bool
}

// ContainerEdits are the CDI container edits of one device.
type ContainerEdits struct {
	Env         []string
	DeviceNodes []DeviceNode
	Mounts      []Mount
	Hooks       []Hook
}

// DeviceNode is a CDI device node. Nil pointers are unset.
type DeviceNode struct {
	Path        string
	HostPath    string
	Type        string
	Major       int64
	Minor       int64
	FileMode    *uint32
	Permissions string
	UID         *uint32
	GID         *uint32
}

// Mount is a CDI mount.
type Mount struct {
	HostPath      string
	ContainerPath string
	Type          string
	Options       []string
}

// Hook is a CDI OCI hook. A nil Timeout is unset.
type Hook struct {
	HookName string
	Path     string
	Args     []string
	Env      []string
	Timeout  *int64
}

// PreparedClaim is what was prepared for a claim, handed back on Unprepare so
// that a driver needs no state of its own.
type PreparedClaim struct {
	UID       types.UID
	Namespace string
	Name      string
	Devices   []PreparedDevice
}

// UnprepareResult is the outcome of unpreparing one claim.
type UnprepareResult struct {
	ClaimUID types.UID
	Err      error
}

// HealthStatus is the health of one device.
type HealthStatus int

const (
	HealthUnknown HealthStatus = iota
	Healthy
	Unhealthy
)

func (s HealthStatus) String() string {
	switch s {
	case Healthy:
		return "Healthy"
	case Unhealthy:
		return "Unhealthy"
	default:
		return "Unknown"
	}
}

// DeviceHealth is the health of one device of a pool.
type DeviceHealth struct {
	Pool    string
	Device  string
	Status  HealthStatus
	Message string
}

// Driver is what a vendor implements and hands to Serve. Every method may be
// called concurrently with the others; ctx carries the host's deadline and is
// cancelled when the host gives up on the call.
type Driver interface {
	// Configure receives the node name and the driver's section of the
	// agent configuration (JSON). It is the first call to every plugin
	// process, made once.
	Configure(ctx context.Context, nodeName string, config []byte) error
	// Info describes the driver. It is called after Configure, so the
	// driver name may come from the configuration; it must not change
	// across restarts of the plugin.
	Info(ctx context.Context) (Info, error)
	// WatchDevices sends the full inventory at once and again on every
	// change, and returns only when ctx is done or send fails. A return
	// while the host still listens counts as a plugin failure.
	WatchDevices(ctx context.Context, send func(inventory.Inventory) error) error
	// Prepare prepares a batch of claims and returns one result per claim.
	// Preparing a claim that is already prepared must return the same
	// devices and edits again (the host retries after crashes).
	Prepare(ctx context.Context, claims []Claim) ([]PrepareResult, error)
	// Unprepare undoes Prepare for a batch of claims and returns one result
	// per claim. A claim the driver does not know, or one already
	// unprepared, succeeds.
	Unprepare(ctx context.Context, claims []PreparedClaim) ([]UnprepareResult, error)
}

// HealthReporter is implemented by drivers that report device health. Such a
// driver sets Info.Health.
type HealthReporter interface {
	// WatchHealth sends a snapshot of every device's health at once and on
	// every change, until ctx is done or send fails.
	WatchHealth(ctx context.Context, send func([]DeviceHealth) error) error
}
