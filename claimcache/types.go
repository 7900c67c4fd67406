package claimcache

import (
	"fmt"
	"slices"
)

// State is where a claim is in its node-side lifecycle. The zero value is not
// a state: a claim without an entry has no State at all.
type State string

// The lifecycle is PrepareStarted → Prepared → UnprepareStarted → removed.
// Each state is durable before the call that entered it returns, so after a
// crash the state says which driver calls may have run.
const (
	// PrepareStarted: the driver may have been asked to prepare the claim,
	// and may have done part of it.
	PrepareStarted State = "PrepareStarted"
	// Prepared: the driver prepared the claim; Drivers holds what it returned.
	Prepared State = "Prepared"
	// UnprepareStarted: the driver may have been asked to unprepare the claim;
	// the entry is kept, with its devices, until Remove.
	UnprepareStarted State = "UnprepareStarted"
)

func (s State) valid() bool {
	return s == PrepareStarted || s == Prepared || s == UnprepareStarted
}

// ClaimRef names one ResourceClaim. The UID tells apart two claims that had
// the same namespace and name at different times.
type ClaimRef struct {
	Namespace string
	Name      string
	UID       string
}

func (r ClaimRef) String() string {
	return fmt.Sprintf("%s/%s (uid %s)", r.Namespace, r.Name, r.UID)
}

// nameKey is the index key of a claim's namespace and name. Kubernetes names
// never contain "/", so the key is unambiguous.
func (r ClaimRef) nameKey() string { return r.Namespace + "/" + r.Name }

func (r ClaimRef) validate() error {
	switch {
	case r.UID == "":
		return invalidf("claim %s/%s: empty UID", r.Namespace, r.Name)
	case r.Namespace == "":
		return invalidf("claim uid %s: empty namespace", r.UID)
	case r.Name == "":
		return invalidf("claim uid %s: empty name", r.UID)
	}
	return nil
}

// Device is one device a driver prepared for a claim: enough to hand the
// driver on Unprepare without asking the API server, and the CDI device IDs
// the container runtime needs.
type Device struct {
	Pool         string
	Device       string
	Requests     []string // the claim's request names this device satisfies
	ShareID      string   // set when the device is shared between claims
	CDIDeviceIDs []string // fully qualified CDI names, e.g. "vendor.com/gpu=gpu0"
	// AdminAccess: the allocation grants administrative access (the
	// request's adminAccess), which Kubernetes gives alongside other
	// claims' use of the device: such a device is not held (see Hold).
	AdminAccess bool
}

// Entry is a copy of one claim's record. Changing it changes nothing in the
// Cache.
type Entry struct {
	Claim ClaimRef
	State State
	// Drivers maps a driver name to the devices it prepared. It is filled by
	// FinishPrepare and kept through later states (and across a reboot) so
	// that an unprepare can hand each driver what it prepared.
	Drivers map[string][]Device
	// PodUIDs are the pods that reference the claim, sorted.
	PodUIDs []string
	// BootID is the boot in which StartPrepare last ran for the claim.
	BootID string
	// Stale reports that BootID is not the Cache's current boot: the node
	// rebooted since, so whatever the driver prepared (device state, CDI
	// specs under /var/run/cdi) is gone. A stale Prepared claim is not
	// prepared any more and StartPrepare is allowed again.
	Stale bool
	// Uncertain, when not empty, says why the claim's last state is not
	// known: damage to the record hid changes that may have touched it.
	// The entry is then in PrepareStarted (the driver may have prepared
	// it, or part of it) and holds every device the record still names for
	// it, so that an Unprepare reaches the driver; the caller reconciles it
	// (see Damage). StartPrepare and StartUnprepare settle it (clear it);
	// FinishPrepare needs a StartPrepare first.
	Uncertain string
}

// PreparedInCurrentBoot reports whether the claim's devices are prepared
// now, so that a Prepare call can be answered from the record without asking
// the driver again.
func (e Entry) PreparedInCurrentBoot() bool { return e.State == Prepared && !e.Stale }

// CDIDeviceIDs returns the CDI device IDs of every device the named driver
// prepared, in device order.
func (e Entry) CDIDeviceIDs(driver string) []string {
	var ids []string
	for _, d := range e.Drivers[driver] {
		ids = append(ids, d.CDIDeviceIDs...)
	}
	return ids
}

func cloneDevices(in []Device) []Device {
	if in == nil {
		return nil
	}
	out := make([]Device, len(in))
	for i, d := range in {
		out[i] = Device{
			Pool:         d.Pool,
			Device:       d.Device,
			Requests:     slices.Clone(d.Requests),
			ShareID:      d.ShareID,
			CDIDeviceIDs: slices.Clone(d.CDIDeviceIDs),
			AdminAccess:  d.AdminAccess,
		}
	}
	return out
}

func cloneDrivers(in map[string][]Device) map[string][]Device {
	if in == nil {
		return nil
	}
	out := make(map[string][]Device, len(in))
	for name, devs := range in {
		out[name] = cloneDevices(devs)
	}
	return out
}

func validateDrivers(uid string, drivers map[string][]Device) error {
	for name, devs := range drivers {
		if name == "" {
			return invalidf("claim %s: empty driver name", uid)
		}
		for i, d := range devs {
			if d.Pool == "" || d.Device == "" {
				return invalidf("claim %s: driver %s: device %d: pool and device names must be set (got pool %q, device %q)", uid, name, i, d.Pool, d.Device)
			}
			for _, id := range d.CDIDeviceIDs {
				if id == "" {
					return invalidf("claim %s: driver %s: device %s/%s: empty CDI device ID", uid, name, d.Pool, d.Device)
				}
			}
		}
	}
	return nil
}
