package claimcache

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/dranode/dranode/checkpoint"
)

// The stored format. It is separate from Entry so that the public type can
// grow without changing what is on disk, and every change of what is on disk
// comes with a migration.
//
// The layouts are: format 0, the prototype layout (recordFormat0), never
// written by a release; format 1, the first layout this module writes
// (record). Shipping the 0 → 1 upgrade proves, before a real format change
// needs it, that stored claims survive one.

// Kind is the checkpoint kind of the record, in the header of every journal
// file: tools that read a record without opening it (dranodectl) tell it
// from other dranode files by it.
const Kind = "dranode.io/claimcache"

// FormatVersion is the format version of the record this package writes (in
// the header of every journal file, see the checkpoint module's README). A
// record of an older version is upgraded on Open; one of a newer version is
// refused with a *checkpoint.NewerVersionError. Tools that read records
// without opening them (dranodectl) compare against it.
const FormatVersion = 1

// storeSchema is the journal schema: the kind, the current format and the
// upgrades from older ones.
func storeSchema() checkpoint.Schema {
	return checkpoint.Schema{
		Kind:    Kind,
		Version: FormatVersion,
		Migrations: map[int]func(json.RawMessage) (json.RawMessage, error){
			0: migrateFormat0To1,
		},
	}
}

// record is the current format of one claim's journal value (key: the claim
// UID).
// Records in a Cache are never changed in place: an operation builds a new
// one, so readers may hold a pointer without a lock.
type record struct {
	Namespace string         `json:"namespace"`
	Name      string         `json:"name"`
	UID       string         `json:"uid"`
	State     State          `json:"state"`
	BootID    string         `json:"bootID"`
	PodUIDs   []string       `json:"podUIDs,omitempty"`
	Drivers   []driverRecord `json:"drivers,omitempty"` // sorted by Driver
	// Uncertain, when set, says why the claim's last state is unknown
	// (damage to the record hid changes to it; see Entry.Uncertain). Such
	// a record is always in PrepareStarted. The field was added to format
	// 1 without a new version on purpose: a release that does not know it
	// ignores it and sees a PrepareStarted entry with every device that may
	// be prepared, which is the conservative reading, whereas a new version
	// would make every older release refuse every record.
	Uncertain string `json:"uncertain,omitempty"`
}

type driverRecord struct {
	Driver  string         `json:"driver"`
	Devices []deviceRecord `json:"devices"`
}

type deviceRecord struct {
	Pool         string   `json:"pool"`
	Device       string   `json:"device"`
	Requests     []string `json:"requests,omitempty"`
	ShareID      string   `json:"shareID,omitempty"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
	// AdminAccess was added to format 1 without a new version, as
	// Uncertain was: a release that does not know it reads the device as
	// held by the claim (the conservative reading, and releases before it
	// held no device at all), and drops it when it rewrites the entry, which
	// leaves the device held until the claim is unprepared.
	AdminAccess bool `json:"adminAccess,omitempty"`
}

func (r *record) ref() ClaimRef { return ClaimRef{Namespace: r.Namespace, Name: r.Name, UID: r.UID} }

// clone returns a deep copy for an operation to change.
func (r *record) clone() *record {
	out := *r
	out.PodUIDs = slices.Clone(r.PodUIDs)
	out.Drivers = make([]driverRecord, len(r.Drivers))
	for i, d := range r.Drivers {
		out.Drivers[i] = driverRecord{Driver: d.Driver, Devices: make([]deviceRecord, len(d.Devices))}
		for k, dev := range d.Devices {
			dev.Requests = slices.Clone(dev.Requests)
			dev.CDIDeviceIDs = slices.Clone(dev.CDIDeviceIDs)
			out.Drivers[i].Devices[k] = dev
		}
	}
	if len(out.Drivers) == 0 {
		out.Drivers = nil
	}
	return &out
}

func (r *record) hasPod(pod string) bool {
	_, found := slices.BinarySearch(r.PodUIDs, pod)
	return found
}

func (r *record) addPod(pod string) {
	if i, found := slices.BinarySearch(r.PodUIDs, pod); !found {
		r.PodUIDs = slices.Insert(r.PodUIDs, i, pod)
	}
}

func (r *record) removePod(pod string) {
	if i, found := slices.BinarySearch(r.PodUIDs, pod); found {
		r.PodUIDs = slices.Delete(r.PodUIDs, i, i+1)
	}
	if len(r.PodUIDs) == 0 {
		r.PodUIDs = nil
	}
}

func (r *record) setDrivers(drivers map[string][]Device) {
	r.Drivers = nil
	for name, devs := range drivers {
		dr := driverRecord{Driver: name, Devices: make([]deviceRecord, len(devs))}
		for i, d := range devs {
			dr.Devices[i] = deviceRecord{
				Pool:         d.Pool,
				Device:       d.Device,
				Requests:     slices.Clone(d.Requests),
				ShareID:      d.ShareID,
				CDIDeviceIDs: slices.Clone(d.CDIDeviceIDs),
				AdminAccess:  d.AdminAccess,
			}
		}
		r.Drivers = append(r.Drivers, dr)
	}
	slices.SortFunc(r.Drivers, func(a, b driverRecord) int { return cmp.Compare(a.Driver, b.Driver) })
}

// entry copies the record out for a caller.
func (r *record) entry(currentBoot string) Entry {
	e := Entry{
		Claim:     r.ref(),
		State:     r.State,
		PodUIDs:   slices.Clone(r.PodUIDs),
		BootID:    r.BootID,
		Stale:     r.BootID != currentBoot,
		Uncertain: r.Uncertain,
	}
	if len(r.Drivers) > 0 {
		e.Drivers = make(map[string][]Device, len(r.Drivers))
		for _, d := range r.Drivers {
			devs := make([]Device, len(d.Devices))
			for i, dev := range d.Devices {
				devs[i] = Device{
					Pool:         dev.Pool,
					Device:       dev.Device,
					Requests:     slices.Clone(dev.Requests),
					ShareID:      dev.ShareID,
					CDIDeviceIDs: slices.Clone(dev.CDIDeviceIDs),
					AdminAccess:  dev.AdminAccess,
				}
			}
			e.Drivers[d.Driver] = devs
		}
	}
	return e
}

// equal reports whether two records store the same thing, to skip writes
// that would change nothing.
func (r *record) equal(o *record) bool {
	return r.Namespace == o.Namespace && r.Name == o.Name && r.UID == o.UID &&
		r.State == o.State && r.BootID == o.BootID && r.Uncertain == o.Uncertain &&
		slices.Equal(r.PodUIDs, o.PodUIDs) &&
		slices.EqualFunc(r.Drivers, o.Drivers, func(a, b driverRecord) bool {
			return a.Driver == b.Driver && slices.EqualFunc(a.Devices, b.Devices, func(x, y deviceRecord) bool {
				return x.Pool == y.Pool && x.Device == y.Device && x.ShareID == y.ShareID && x.AdminAccess == y.AdminAccess &&
					slices.Equal(x.Requests, y.Requests) && slices.Equal(x.CDIDeviceIDs, y.CDIDeviceIDs)
			})
		})
}

// check validates a restored record against its journal key.
func (r *record) check(key string) error {
	bad := func(reason string, args ...any) error {
		return fmt.Errorf("%w: record %q: %s", ErrBadRecord, key, fmt.Sprintf(reason, args...))
	}
	switch {
	case r.UID != key:
		return bad("uid %q does not match its key", r.UID)
	case r.Namespace == "" || r.Name == "":
		return bad("empty namespace or name")
	case !r.State.valid():
		return bad("unknown state %q", r.State)
	case r.BootID == "":
		return bad("empty boot ID")
	case r.Uncertain != "" && r.State != PrepareStarted:
		return bad("uncertain in state %s, not %s", r.State, PrepareStarted)
	case !slices.IsSorted(r.PodUIDs):
		return bad("pod UIDs not sorted")
	}
	for _, d := range r.Drivers {
		if d.Driver == "" {
			return bad("empty driver name")
		}
		for _, dev := range d.Devices {
			if dev.Pool == "" || dev.Device == "" {
				return bad("driver %s: device without pool or name", d.Driver)
			}
		}
	}
	return nil
}

// recordFormat0 is the prototype layout, modelled on the kubelet's own
// claim checkpoint: no lifecycle state (a record meant "prepared") and one
// flat device list tagged with driver names.
type recordFormat0 struct {
	ClaimUID  string          `json:"claimUID"`
	ClaimName string          `json:"claimName"`
	Namespace string          `json:"namespace"`
	PodUIDs   []string        `json:"podUIDs"`
	BootID    string          `json:"bootID"`
	Devices   []deviceFormat0 `json:"devices"`
}

type deviceFormat0 struct {
	DriverName   string   `json:"driverName"`
	PoolName     string   `json:"poolName"`
	DeviceName   string   `json:"deviceName"`
	RequestNames []string `json:"requestNames"`
	CDIDevices   []string `json:"cdiDevices"`
}

func migrateFormat0To1(raw json.RawMessage) (json.RawMessage, error) {
	var old recordFormat0
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&old); err != nil {
		return nil, fmt.Errorf("claimcache: upgrade record from format 0: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("claimcache: upgrade record from format 0: data after the record at byte %d", dec.InputOffset())
	}
	r := record{
		Namespace: old.Namespace,
		Name:      old.ClaimName,
		UID:       old.ClaimUID,
		State:     Prepared,
		BootID:    old.BootID,
		PodUIDs:   slices.Compact(slices.Sorted(slices.Values(old.PodUIDs))),
	}
	drivers := map[string][]Device{}
	for _, d := range old.Devices {
		if d.DriverName == "" {
			return nil, fmt.Errorf("claimcache: upgrade record %s from format 0: device %s/%s has no driver name", old.ClaimUID, d.PoolName, d.DeviceName)
		}
		drivers[d.DriverName] = append(drivers[d.DriverName], Device{
			Pool: d.PoolName, Device: d.DeviceName, Requests: d.RequestNames, CDIDeviceIDs: d.CDIDevices,
		})
	}
	r.setDrivers(drivers)
	return json.Marshal(r)
}
