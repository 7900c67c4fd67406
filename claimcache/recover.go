package claimcache

import (
	"cmp"
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

// merge adds o's pods and devices (by driver, pool and device) to r.
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
			if !slices.ContainsFunc(r.Drivers[i].Devices, func(x deviceRecord) bool { return x.Pool == dev.Pool && x.Device == dev.Device }) {
				dev.Requests = slices.Clone(dev.Requests)
				dev.CDIDeviceIDs = slices.Clone(dev.CDIDeviceIDs)
				r.Drivers[i].Devices = append(r.Drivers[i].Devices, dev)
			}
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
