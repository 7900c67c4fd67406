package claimcache

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
)

// A device is held by every claim the record names it for, in every state
// and in every boot — PrepareStarted (an uncertain entry included),
// Prepared, UnprepareStarted — until the claim is removed, and by every
// claim whose Hold on it is not released yet. The holders of each device
// are indexed in memory beside the record, under the Cache's own mutex:
// built from the record when it is opened, changed with each change made
// durable, so that a hold costs no fsync, no file and no scan of the
// record, and a new instance that opens the record (after a restart, a
// crash or a hand-over) holds exactly what the old one did.
//
// Two holds of one device by two claims conflict unless one of them is for
// admin access (Device.AdminAccess, which Kubernetes allows beside other
// claims' use) or both are shares (Device.ShareID) with distinct share IDs
// of a device the driver publishes with allowMultipleAllocations (the
// Published function passed to Hold says which). Two devices of different
// names conflict when they consume the same counters beyond their value
// (counters.go). The same claim (UID) never conflicts with itself.

// ErrDeviceInUse is matched (errors.Is) by a *DeviceInUseError.
var ErrDeviceInUse = errors.New("claimcache: device in use by another claim")

// DeviceInUseError says that a claim cannot have a device because another
// claim holds it. Its message is written for a pod's events, where the
// kubelet shows a driver's prepare error: it names the device and both
// claims.
type DeviceInUseError struct {
	Driver, Pool, Device string
	ShareID              string   // the share asked for, if any
	Claim                ClaimRef // the claim refused
	Holder               ClaimRef // the claim that holds the device
	// HolderState is the holder's recorded state, or "" while the holder
	// is being prepared and not recorded yet.
	HolderState State
	// HolderUncertain: the holder's last state is not known (damage to
	// the record); it holds its devices until reconciled.
	HolderUncertain bool
	// CounterSet and Counter, when set, say that the device is refused for
	// a counter it consumes (a partitionable device: the same hardware as
	// another device name): with what the holder's devices, HolderDevice
	// among them, consume of it, the counter's published value is
	// exceeded.
	CounterSet, Counter, HolderDevice string
}

func (e *DeviceInUseError) Error() string {
	what := "device " + e.Driver + "/" + e.Pool + "/" + e.Device
	if e.ShareID != "" {
		what += " (share " + e.ShareID + ")"
	}
	if e.CounterSet != "" {
		what += fmt.Sprintf(" (with device %s it exceeds counter %s of counter set %s)", e.HolderDevice, e.Counter, e.CounterSet)
	}
	return fmt.Sprintf("%s is in use by claim %s/%s (uid %s, %s): claim %s/%s (uid %s) gets it once that claim is unprepared",
		what, e.Holder.Namespace, e.Holder.Name, e.Holder.UID, e.holderState(), e.Claim.Namespace, e.Claim.Name, e.Claim.UID)
}

func (e *DeviceInUseError) holderState() string {
	switch {
	case e.HolderUncertain:
		return "state uncertain after damage to the record"
	case e.HolderState == "":
		return "being prepared"
	case e.HolderState == PrepareStarted:
		return "being prepared, or its prepare was interrupted"
	case e.HolderState == Prepared:
		return "prepared"
	case e.HolderState == UnprepareStarted:
		return "being unprepared, or its unprepare failed"
	}
	return string(e.HolderState)
}

// Is makes errors.Is(err, ErrDeviceInUse) true.
func (e *DeviceInUseError) Is(target error) bool { return target == ErrDeviceInUse }

// Hold is a claim's in-memory hold on the devices it is about to prepare,
// from Hold until Release. It makes the check and the reservation one step
// for claims prepared at the same time, including through RecordPrepared,
// which records nothing before the driver is called.
type Hold struct {
	c       *Cache
	claim   ClaimRef
	drivers map[string][]Device // the caller's, not copied
	held    bool                // guarded by c.mu
	next    *Hold               // the claim's next unreleased Hold; guarded by c.mu
}

// deviceKey names one device of one driver.
type deviceKey struct{ driver, pool, device string }

// holder is one claim's hold on one device: from its record (hold nil) or
// from a Hold.
type holder struct {
	claim     ClaimRef
	shareID   string
	state     State
	uncertain bool
	hold      *Hold
}

// PublishedDevice is what a driver's latest inventory says of one device,
// as far as holding it goes. Its zero value is a device the inventory does
// not list.
type PublishedDevice struct {
	// Listed: the inventory lists the device. Of a device it no longer
	// lists, Hold counts what it last said the device consumes.
	Listed bool
	// AllowMultipleAllocations: the device is published with
	// allowMultipleAllocations, so that its shares (allocations with
	// distinct share IDs) do not conflict.
	AllowMultipleAllocations bool
	// ConsumesCounters is what the device consumes from its pool's counter
	// sets (consumesCounters, KEP-4815 partitionable devices), and
	// CounterValues the value of each counter of those sets (the pool's
	// sharedCounters). Nil for a device that consumes none.
	ConsumesCounters, CounterValues CounterAmounts
}

// CounterAmounts are amounts of counters by counter set and counter name:
// what a device consumes, or what a counter set holds. The amounts are
// exact (a resource.Quantity as a rational) and never changed by Hold.
type CounterAmounts map[string]map[string]*big.Rat

// Published reports how a driver publishes a device in its latest
// inventory: whether claims may hold shares of it and the counters it
// consumes. A nil Published shares nothing and counts no counters. Hold
// calls it without holding the Cache's locks, for the claim's devices and,
// when they consume counters, for the devices other claims hold in the
// same pools.
type Published func(driver, pool, device string) PublishedDevice

// Hold checks that no other claim holds any of the devices the claim's
// allocation names (per driver, as FinishPrepare takes them; CDI IDs may be
// empty) and holds them for the claim, in one step, until the returned
// Hold is released. Call it before any driver is asked to prepare the
// claim and release it once the claim's outcome is recorded (or the
// prepare failed): while a claim is recorded, its record holds its devices.
// StartPrepare records the devices of the claim's unreleased Holds in
// PrepareStarted, so that they stay held after a crash.
//
// A device held by another claim is a *DeviceInUseError naming it and the
// holder. Devices with AdminAccess are neither checked nor held; a share of
// a device published says allows multiple allocations conflicts only with
// a hold of the same share ID or without one. Two devices of one pool are
// the same hardware as far as they consume the same counters: a device
// whose counters, added to what the devices other claims hold consume
// (each device once), exceed a counter's published value is a
// *DeviceInUseError naming the counter and a holder, the scheduler's own
// rule kept on the node. Nothing is written. The Hold keeps drivers: the
// caller must not change it until Release.
func (c *Cache) Hold(ref ClaimRef, drivers map[string][]Device, published Published) (*Hold, error) {
	if err := ref.validate(); err != nil {
		return nil, err
	}
	if err := validateDrivers(ref.UID, drivers); err != nil {
		return nil, err
	}
	// Asked before the Cache's mutex is taken: published is the caller's
	// code, and reads the caller's state under the caller's locks.
	var stack [8]answer
	asked := answers(stack[:0])
	if published != nil {
		for driver, devs := range drivers {
			for _, d := range devs {
				if !d.AdminAccess {
					asked = asked.ask(published, deviceKey{driver, d.Pool, d.Device})
				}
			}
		}
	}
	h := &Hold{c: c, claim: ref, drivers: drivers}
	c.mu.Lock()
	// The devices other claims hold beside counter-consuming ones are
	// asked about too, outside the mutex; a device held meanwhile is asked
	// about in the next round, each device once.
	for published != nil {
		unasked := c.unaskedLocked(ref, drivers, asked)
		if len(unasked) == 0 {
			break
		}
		c.mu.Unlock()
		for _, k := range unasked {
			asked = asked.ask(published, k)
		}
		c.mu.Lock()
	}
	defer c.mu.Unlock()
	c.learnLocked(asked)
	for driver, devs := range h.drivers {
		for _, d := range devs {
			if err := c.conflictLocked(ref, driver, d, asked); err != nil {
				return nil, err
			}
		}
	}
	if err := c.counterConflictLocked(ref, drivers, asked); err != nil {
		return nil, err
	}
	for driver, devs := range h.drivers {
		for _, d := range devs {
			if !d.AdminAccess {
				k := deviceKey{driver, d.Pool, d.Device}
				c.holders[k] = append(c.holders[k], holder{claim: ref, shareID: d.ShareID, hold: h})
			}
		}
	}
	h.held = true
	h.next = c.holds[ref.UID]
	c.holds[ref.UID] = h
	return h, nil
}

// conflictLocked returns the error for a device another claim holds;
// asked says which devices allow multiple allocations.
func (c *Cache) conflictLocked(ref ClaimRef, driver string, d Device, asked answers) error {
	if d.AdminAccess {
		return nil
	}
	k := deviceKey{driver, d.Pool, d.Device}
	for _, o := range c.holders[k] {
		if o.claim.UID == ref.UID {
			continue
		}
		if d.ShareID != "" && o.shareID != "" && d.ShareID != o.shareID && shareable(asked, k) {
			continue
		}
		return &DeviceInUseError{
			Driver: driver, Pool: d.Pool, Device: d.Device, ShareID: d.ShareID,
			Claim: ref, Holder: o.claim, HolderState: o.state, HolderUncertain: o.uncertain,
		}
	}
	return nil
}

// shareable reports whether the driver publishes device k with
// allowMultipleAllocations.
func shareable(asked answers, k deviceKey) bool {
	p, _ := asked.get(k)
	return p.AllowMultipleAllocations
}

// Release ends the hold; the claim's record, if any, still holds what it
// names. Releasing again does nothing.
func (h *Hold) Release() {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if !h.held {
		return
	}
	h.held = false
	for driver, devs := range h.drivers {
		for _, d := range devs {
			if !d.AdminAccess {
				c.unholdLocked(deviceKey{driver, d.Pool, d.Device}, func(o holder) bool { return o.hold == h })
			}
		}
	}
	switch first := c.holds[h.claim.UID]; {
	case first == h && h.next == nil:
		delete(c.holds, h.claim.UID)
	case first == h:
		c.holds[h.claim.UID] = h.next
	default:
		for p := first; p.next != nil; p = p.next {
			if p.next == h {
				p.next = h.next
				break
			}
		}
	}
}

// heldDevicesLocked returns the devices of the claim's unreleased Holds,
// as a record to merge, or nil.
func (c *Cache) heldDevicesLocked(ref ClaimRef) *record {
	if c.holds[ref.UID] == nil {
		return nil
	}
	r := &record{Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID}
	for h := c.holds[ref.UID]; h != nil; h = h.next {
		add := &record{}
		add.setDrivers(h.drivers)
		r.merge(add)
	}
	return r
}

// indexLocked adds the holds of a record, unindexLocked removes them; the
// caller holds c.mu.
func (c *Cache) indexLocked(r *record) {
	for _, d := range r.Drivers {
		for _, dev := range d.Devices {
			if !dev.AdminAccess {
				k := deviceKey{d.Driver, dev.Pool, dev.Device}
				c.holders[k] = append(c.holders[k], holder{claim: r.ref(), shareID: dev.ShareID, state: r.State, uncertain: r.Uncertain != ""})
			}
		}
	}
}

func (c *Cache) unindexLocked(r *record) {
	for _, d := range r.Drivers {
		for _, dev := range d.Devices {
			if !dev.AdminAccess {
				c.unholdLocked(deviceKey{d.Driver, dev.Pool, dev.Device}, func(o holder) bool { return o.hold == nil && o.claim.UID == r.UID })
			}
		}
	}
}

// unholdLocked drops the holders of device k that match. The device's
// slice stays in the map, emptied, so that the next claim that holds it
// appends without allocating: the map keeps a key for each device held
// since Open, which the drivers' devices bound.
func (c *Cache) unholdLocked(k deviceKey, match func(holder) bool) {
	if hs, ok := c.holders[k]; ok {
		c.holders[k] = slices.DeleteFunc(hs, match)
	}
}

// Holders returns the claims that hold a device of a driver (by record or
// by Hold), sorted by namespace, name and UID, each once.
func (c *Cache) Holders(driver, pool, device string) []ClaimRef {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []ClaimRef
	for _, o := range c.holders[deviceKey{driver, pool, device}] {
		if !slices.Contains(out, o.claim) {
			out = append(out, o.claim)
		}
	}
	slices.SortFunc(out, compareRefs)
	return out
}
