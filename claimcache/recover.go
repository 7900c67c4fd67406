package claimcache

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/dranode/dranode/checkpoint"
)

// Damage says what Open did with a damaged record. It is only ever set
// when the journal recovers from damage (checkpoint.MoveCorruptAside passed
// through WithJournalOptions); without it, damage makes Open fail with a
// *checkpoint.CorruptError and changes nothing.
//
// Every change stored before the damage was restored. Changes after it are
// not trusted: they are copied aside (Aside) and, where they can still be
// read, name the claims in Uncertain; where they cannot, every restored
// claim they may have changed is uncertain too. What the caller must do:
//
//   - Log Cause, Aside and every Uncertain claim, and count them (a metric):
//     a damaged record is a disk or filesystem problem someone must look at.
//   - Reconcile each uncertain entry (Entry.Uncertain set, listed in
//     RestoreReport.Uncertain) before serving: if the kubelet's own DRA
//     checkpoint lists the claim as prepared, keep the entry: the kubelet
//     will call Unprepare (StartUnprepare, drivers, Remove) or Prepare
//     again (StartPrepare, driver, FinishPrepare), and either settles it.
//     If the API server says the claim is gone, or holds another UID under
//     its namespace and name, unprepare it now: StartUnprepare, each
//     driver, Remove. Never roll an uncertain entry back merely because it
//     is in PrepareStarted: it may be in use.
//   - When Unknown is set, changes that nobody can read were lost: they
//     may have named claims the Cache no longer holds, or devices an
//     uncertain entry does not hold. For every claim the kubelet's
//     checkpoint lists as prepared by the caller's drivers that the Cache
//     does not hold, or holds as uncertain without all the devices listed
//     there, call RecordUncertain with those devices, so that the
//     kubelet's Unprepare reaches the drivers with them.
//
// Cache.Reconcile applies these rules, given the kubelet's claims, a lookup
// in the API server and the drivers' unprepare.
type Damage struct {
	// Cause is the first damage: the file, the offset where trusted data
	// ends, and why.
	Cause *checkpoint.CorruptError
	// KeptRecords is the number of journal records restored.
	KeptRecords int
	// Aside lists the copies of everything from the damage on, kept next
	// to the record for inspection (dranodectl checkpoint inspect).
	Aside []checkpoint.AsideCopy
	// Uncertain lists the claims whose last state the damage hid, sorted
	// by UID: those that readable changes after the damage name, and, when
	// changes that could not be read came after restored ones
	// (checkpoint.Recovery.RestoredUnsure), every restored claim too. Those
	// that could be recorded are uncertain entries now (see
	// Entry.Uncertain).
	Uncertain []UncertainClaim
	// UnreadableBytes counts the bytes after the damage from which no
	// change could be read.
	UnreadableBytes int64
	// Lost describes data known to be gone without leaving bytes to read.
	Lost []string
	// Unknown reports that some changes could not be read at all
	// (UnreadableBytes > 0 or Lost not empty): claims other than those in
	// Uncertain may have been changed by them.
	Unknown bool
}

// UncertainClaim is a claim that a change after the damage names.
type UncertainClaim struct {
	// Claim names it: the UID always; the namespace and name when the
	// record or a readable change holds them.
	Claim ClaimRef
	// Recorded: the Cache holds it as an uncertain entry, with every
	// device the record and the readable changes name for it. When false,
	// nothing names its namespace, name or devices (only a removal, or a
	// value that did not decode, was readable), or its namespace and name
	// are recorded under another UID (Conflict).
	Recorded bool
	// LastSeen is the state of the last readable change, "removed" for a
	// removal, or why it could not be used. It is a hint, not the truth.
	LastSeen string
	// Conflict is the UID recorded under the same namespace and name, when
	// that is why it could not be recorded.
	Conflict string
}

// recoverFrom turns the journal's recovery into uncertain entries, durable
// before Open returns: the aside copies are not read again, so this is the
// only time the claims they name are known.
func (c *Cache) recoverFrom(rec *checkpoint.Recovery[record]) (*Damage, error) {
	d := &Damage{
		Cause:           rec.Damage,
		KeptRecords:     rec.Kept,
		Aside:           rec.Aside,
		UnreadableBytes: rec.Unreadable,
		Lost:            rec.Lost,
		Unknown:         !rec.Complete(),
	}
	reason := fmt.Sprintf("the record was damaged at %s offset %d; changes after it are not trusted", rec.Damage.Path, rec.Damage.Offset)
	type seen struct {
		puts []record
		last string
	}
	byUID := map[string]*seen{}
	for _, u := range rec.Unsure {
		s := byUID[u.Key]
		if s == nil {
			s = &seen{}
			byUID[u.Key] = s
		}
		switch {
		case u.Delete:
			s.last = "removed"
		case u.ValueErr != nil:
			s.last = "value does not decode: " + u.ValueErr.Error()
		case u.Value.check(u.Key) != nil:
			s.last = u.Value.check(u.Key).Error()
		default:
			s.puts = append(s.puts, u.Value)
			s.last = string(u.Value.State)
		}
	}
	if rec.RestoredUnsure {
		// A change nobody can read came after what was restored: it may
		// have changed any claim (a lost FinishPrepare leaves one restored
		// in PrepareStarted without its devices).
		for uid := range c.entries {
			if byUID[uid] == nil {
				byUID[uid] = &seen{last: "restored; changes after the damage could not be read"}
			}
		}
	}
	var changes []checkpoint.Change[record]
	for _, uid := range slices.Sorted(maps.Keys(byUID)) {
		s := byUID[uid]
		u := UncertainClaim{Claim: ClaimRef{UID: uid}, LastSeen: s.last}
		var next *record
		if cur := c.entries[uid]; cur != nil {
			next = cur.clone()
		} else if len(s.puts) > 0 {
			next = s.puts[len(s.puts)-1].clone()
		}
		if next == nil {
			d.Uncertain = append(d.Uncertain, u)
			continue
		}
		for _, p := range s.puts {
			if p.ref() == next.ref() {
				next.merge(&p)
			}
		}
		next.State, next.Uncertain = PrepareStarted, reason
		u.Claim = next.ref()
		if owner, ok := c.byName[next.ref().nameKey()]; ok && owner != uid {
			u.Conflict = owner
			d.Uncertain = append(d.Uncertain, u)
			continue
		}
		c.entries[uid] = next
		c.byName[next.ref().nameKey()] = uid
		changes = append(changes, checkpoint.Change[record]{Key: uid, Value: *next})
		u.Recorded = true
		d.Uncertain = append(d.Uncertain, u)
	}
	if len(changes) > 0 {
		if err := c.journal.Commit(changes...); err != nil {
			return nil, fmt.Errorf("record %d uncertain claims: %w", len(changes), err)
		}
	}
	return d, nil
}

// merge adds o's pods and devices (by driver, pool, device and share ID)
// to r.
func (r *record) merge(o *record) {
	for _, p := range o.PodUIDs {
		r.addPod(p)
	}
	for _, od := range o.Drivers {
		i, found := slices.BinarySearchFunc(r.Drivers, od.Driver, func(d driverRecord, name string) int { return cmp.Compare(d.Driver, name) })
		if !found {
			r.Drivers = slices.Insert(r.Drivers, i, driverRecord{Driver: od.Driver})
		}
		for _, dev := range od.Devices {
			r.Drivers[i].Devices = mergeDevice(r.Drivers[i].Devices, dev)
		}
	}
}

// RecordUncertain durably records a claim whose state the record lost, as
// an uncertain entry (Entry.Uncertain set to reason) in PrepareStarted with
// these devices, so that an Unprepare hands them to the drivers. It is for
// reconciling after damage (Damage.Unknown): typically a claim the
// kubelet's own checkpoint lists as prepared, with the devices listed
// there, that the Cache does not hold. On a claim already recorded as
// uncertain it adds the devices and pods; on any other recorded claim it is
// a *TransitionError (its state is known). A namespace and name recorded
// under another UID is a *UIDMismatchError.
func (c *Cache) RecordUncertain(ref ClaimRef, drivers map[string][]Device, reason string) (Entry, error) {
	if err := ref.validate(); err != nil {
		return Entry{}, err
	}
	if reason == "" {
		return Entry{}, invalidf("RecordUncertain %s: empty reason", ref.UID)
	}
	if err := validateDrivers(ref.UID, drivers); err != nil {
		return Entry{}, err
	}
	unlockName := c.claimLocks.lock("name\x00" + ref.nameKey())
	defer unlockName()
	return c.change(ref.UID, OpRecordUncertain, func(cur *record) (*record, error) {
		if err := c.checkName(ref, cur); err != nil {
			return nil, err
		}
		add := &record{Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID}
		add.setDrivers(drivers)
		if cur == nil {
			add.State, add.BootID, add.Uncertain = PrepareStarted, c.bootID, reason
			return add, nil
		}
		if cur.Uncertain == "" {
			return nil, &TransitionError{UID: ref.UID, From: cur.State, Stale: cur.BootID != c.bootID, Op: OpRecordUncertain}
		}
		next := cur.clone()
		next.merge(add)
		return next, nil
	})
}

// KubeletClaim is a claim the kubelet's own DRA checkpoint lists as prepared
// (package github.com/dranode/dranode/checkpoint/kubeletcompat reads it),
// with the devices it lists for the caller's drivers only.
type KubeletClaim struct {
	Claim   ClaimRef
	Drivers map[string][]Device
}

// Reconciler is what Reconcile needs from outside the record.
type Reconciler struct {
	// Kubelet lists the claims the kubelet's checkpoint holds as prepared
	// by the caller's drivers (leave out claims only other drivers
	// prepared).
	Kubelet []KubeletClaim
	// Exists reports whether the API server holds the claim with this
	// namespace, name and UID: false when it is deleted or its name now
	// belongs to another UID.
	Exists func(ClaimRef) (bool, error)
	// Unprepare has the drivers unprepare an entry's devices (Reconcile
	// calls it between StartUnprepare and Remove).
	Unprepare func(Entry) error
}

// Reconciliation says what Reconcile did; each list is sorted by namespace,
// name and UID.
type Reconciliation struct {
	// Recorded: claims, or devices of uncertain entries, that only the
	// kubelet's checkpoint named, now recorded as uncertain.
	Recorded []Entry
	// Kept: uncertain entries the kubelet lists as prepared; its next
	// Unprepare or Prepare settles them.
	Kept []Entry
	// Unprepared: uncertain entries whose claim is gone, unprepared and
	// removed.
	Unprepared []Entry
	// Waiting: uncertain entries the kubelet does not list but whose claim
	// exists (a prepare may be coming); a Prepare or a later Reconcile
	// settles them.
	Waiting []Entry
	// Errors, one per claim that could not be reconciled; such a claim
	// stays uncertain (or, if its drivers failed to unprepare it, in
	// UnprepareStarted, for a retry).
	Errors []error
}

// Reconcile applies the rules in Damage's documentation to every uncertain
// entry, holding each claim's WithClaim lock while it works on it:
//
//  1. Every claim the kubelet lists that the record does not hold, and
//     every device the kubelet lists for an uncertain entry that it does
//     not hold, is recorded with RecordUncertain, so that the kubelet's
//     Unprepare reaches the drivers with it. (Damage.Unknown says this is
//     needed; doing it at every call is harmless, and still done after a
//     restart that lost the report.)
//  2. An uncertain entry the kubelet lists is kept for the kubelet to
//     settle.
//  3. Otherwise, when Exists says the claim is gone, the entry is
//     unprepared: StartUnprepare, Unprepare, Remove.
//  4. Otherwise it waits.
//
// A claim the record holds with a known state is never touched. Call it
// after Open, before serving the kubelet, and whenever RestoreReport lists
// uncertain entries.
func (c *Cache) Reconcile(r Reconciler) Reconciliation {
	var out Reconciliation
	fail := func(ref ClaimRef, err error) {
		out.Errors = append(out.Errors, fmt.Errorf("claimcache: reconcile %s: %w", ref, err))
	}
	listed := map[string]bool{}
	for _, k := range r.Kubelet {
		listed[k.Claim.UID] = true
		err := c.WithClaim(k.Claim.UID, func() error {
			cur, err := c.Get(k.Claim.UID)
			switch {
			case err == nil && (cur.Uncertain == "" || holdsAll(cur, k.Drivers)):
				return nil
			case err != nil && !errors.Is(err, ErrNotFound):
				return err
			}
			e, err := c.RecordUncertain(k.Claim, k.Drivers, "listed as prepared by the kubelet's checkpoint, not (fully) by the record")
			if err == nil {
				out.Recorded = append(out.Recorded, e)
			}
			return err
		})
		if err != nil {
			fail(k.Claim, err)
		}
	}
	for _, e := range c.List() {
		if e.Uncertain == "" {
			continue
		}
		if listed[e.Claim.UID] {
			out.Kept = append(out.Kept, e)
			continue
		}
		err := c.WithClaim(e.Claim.UID, func() error {
			exists, err := r.Exists(e.Claim)
			if err != nil {
				return fmt.Errorf("does the claim exist: %w", err)
			}
			if exists {
				out.Waiting = append(out.Waiting, e)
				return nil
			}
			u, err := c.StartUnprepare(e.Claim.UID)
			if err != nil {
				return err
			}
			if err := r.Unprepare(u); err != nil {
				return fmt.Errorf("unprepare: %w", err)
			}
			if err := c.Remove(e.Claim.UID); err != nil {
				return err
			}
			out.Unprepared = append(out.Unprepared, u)
			return nil
		})
		if err != nil {
			fail(e.Claim, err)
		}
	}
	for _, l := range [][]Entry{out.Recorded, out.Kept, out.Unprepared, out.Waiting} {
		sortEntries(l)
	}
	return out
}

// holdsAll reports whether e holds every device of drivers.
func holdsAll(e Entry, drivers map[string][]Device) bool {
	for name, devs := range drivers {
		for _, d := range devs {
			if !slices.ContainsFunc(e.Drivers[name], func(x Device) bool { return x.Pool == d.Pool && x.Device == d.Device }) {
				return false
			}
		}
	}
	return true
}

// mergeDevice adds dev to devs unless they name it already (pool, device,
// share ID); a device named both with and without admin access is kept
// without, so that it stays held.
func mergeDevice(devs []deviceRecord, dev deviceRecord) []deviceRecord {
	i := slices.IndexFunc(devs, func(x deviceRecord) bool {
		return x.Pool == dev.Pool && x.Device == dev.Device && x.ShareID == dev.ShareID
	})
	if i >= 0 {
		devs[i].AdminAccess = devs[i].AdminAccess && dev.AdminAccess
		return devs
	}
	dev.Requests = slices.Clone(dev.Requests)
	dev.CDIDeviceIDs = slices.Clone(dev.CDIDeviceIDs)
	return append(devs, dev)
}
