package claimcache

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/dranode/dranode/checkpoint"
)

// Cache is the durable record of prepared claims in one directory. All
// methods are safe for concurrent use. Operations on different claims run in
// parallel and share the journal's fsyncs; operations on one claim run one at
// a time, each checked against that claim's durable state.
type Cache struct {
	journal *checkpoint.Journal[record]
	bootID  string

	// claimLocks serializes operations per claim UID, and StartPrepare per
	// namespace/name (so that two UIDs cannot both take one name).
	claimLocks keyedMutex
	// callerLocks is WithClaim's: a separate instance, so that the Cache's
	// methods, which take claimLocks, can run inside WithClaim.
	callerLocks keyedMutex

	// life is read-held by every operation that writes, so that Close waits
	// for them instead of closing the journal under them.
	life   sync.RWMutex
	closed bool // guarded by life

	mu      sync.RWMutex
	entries map[string]*record     // by UID; the durable state; records are never modified in place
	byName  map[string]string      // namespace/name → UID
	holders map[deviceKey][]holder // who holds each device: entries and holds (hold.go)
	holds   map[string]*Hold       // each claim's unreleased Holds (a list through Hold.next)
	// lastConsumed is what each device Hold was told of last consumes of
	// its pool's counters, for when the inventory no longer lists it
	// (counters.go); in memory only.
	lastConsumed map[deviceKey]CounterAmounts
}

// RestoreReport says what Open found.
type RestoreReport struct {
	// Entries is the number of claims restored.
	Entries int
	// RebootDetected: some entries were recorded in another boot than the
	// current one; they are Stale and none of them counts as prepared.
	RebootDetected bool
	// Interrupted lists the entries a crash left in PrepareStarted or
	// UnprepareStarted: roll each back (StartUnprepare, driver, Remove) or
	// finish it. Sorted by namespace, name, UID.
	Interrupted []Entry
	// NoLongerPrepared lists the entries that were Prepared in an earlier
	// boot; their devices are recorded so that they can be unprepared, and
	// the next StartPrepare prepares them again.
	NoLongerPrepared []Entry
	// Uncertain lists the entries whose last state is not known (see
	// Entry.Uncertain), made uncertain by this Open's recovery or an
	// earlier one and not settled since: reconcile each (see Damage). They
	// are not in Interrupted, although they are in PrepareStarted: rolling
	// one back could take devices from a running pod. Sorted by namespace,
	// name, UID.
	Uncertain []Entry
	// Damage is set when this Open found the record damaged and recovered
	// what it could (only under checkpoint.MoveCorruptAside): what was
	// kept, what was copied aside, and the claims whose state it hid.
	Damage *Damage
}

type options struct {
	journal []checkpoint.Option
}

// Option configures Open.
type Option func(*options)

// WithJournalOptions passes options to the underlying checkpoint journal, for
// example checkpoint.WithCorruptPolicy.
func WithJournalOptions(opts ...checkpoint.Option) Option {
	return func(o *options) { o.journal = append(o.journal, opts...) }
}

// BootIDPath is where Linux publishes the ID of the current boot.
const BootIDPath = "/proc/sys/kernel/random/boot_id"

// ReadBootID returns the current boot's ID from BootIDPath.
func ReadBootID() (string, error) {
	b, err := os.ReadFile(BootIDPath)
	if err != nil {
		return "", fmt.Errorf("claimcache: read boot ID: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("claimcache: read boot ID: %s is empty", BootIDPath)
	}
	return id, nil
}

// Open restores the record stored in dir (creating it if needed) and takes
// its lock; bootID is the current boot (see ReadBootID). Entries recorded in
// another boot are reported and marked Stale. A record that cannot be read is
// an error, never silently dropped: by default damage is a
// *checkpoint.CorruptError and nothing changes; with
// WithJournalOptions(checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside))
// every change before the damage is restored, the claims that readable
// changes after it name become uncertain entries (durably, before Open
// returns), and RestoreReport.Damage says what happened and what the caller
// must reconcile.
func Open(dir, bootID string, opts ...Option) (*Cache, *RestoreReport, error) {
	if bootID == "" {
		return nil, nil, invalidf("open %s: empty boot ID", dir)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	j, err := checkpoint.OpenJournal[record](dir, storeSchema(), o.journal...)
	if err != nil {
		return nil, nil, fmt.Errorf("claimcache: open %s: %w", dir, err)
	}
	c := &Cache{
		journal: j,
		bootID:  bootID,
		entries: make(map[string]*record),
		byName:  make(map[string]string),
		holders: make(map[deviceKey][]holder),
		holds:   make(map[string]*Hold),

		lastConsumed: make(map[deviceKey]CounterAmounts),
	}
	report := &RestoreReport{}
	for key, r := range j.Snapshot() {
		if err := r.check(key); err != nil {
			j.Close()
			return nil, nil, fmt.Errorf("claimcache: open %s: %w", dir, err)
		}
		if other, dup := c.byName[r.ref().nameKey()]; dup {
			j.Close()
			return nil, nil, fmt.Errorf("claimcache: open %s: %w: claims %s and %s both named %s", dir, ErrBadRecord, other, r.UID, r.ref().nameKey())
		}
		c.entries[key] = &r
		c.byName[r.ref().nameKey()] = key
	}
	if rec := j.Recovery(); rec != nil {
		if report.Damage, err = c.recoverFrom(rec); err != nil {
			j.Close()
			return nil, nil, fmt.Errorf("claimcache: open %s: %w", dir, err)
		}
	}
	for _, r := range c.entries {
		c.indexLocked(r) // no other goroutine has the Cache yet
		e := r.entry(bootID)
		if e.Stale {
			report.RebootDetected = true
		}
		switch {
		case r.Uncertain != "":
			report.Uncertain = append(report.Uncertain, e)
		case r.State == PrepareStarted || r.State == UnprepareStarted:
			report.Interrupted = append(report.Interrupted, e)
		case e.Stale:
			report.NoLongerPrepared = append(report.NoLongerPrepared, e)
		}
	}
	report.Entries = len(c.entries)
	sortEntries(report.Interrupted)
	sortEntries(report.NoLongerPrepared)
	sortEntries(report.Uncertain)
	return c, report, nil
}

// Close waits for operations in flight and releases the directory.
func (c *Cache) Close() error {
	c.life.Lock()
	defer c.life.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if err := c.journal.Close(); err != nil {
		return fmt.Errorf("claimcache: close: %w", err)
	}
	return nil
}

// BootID returns the boot the Cache was opened in.
func (c *Cache) BootID() string { return c.bootID }

// Fsyncs returns the fsync calls made by the underlying journal since Open.
func (c *Cache) Fsyncs() uint64 { return c.journal.Fsyncs() }

// Len returns the number of recorded claims.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}

// Get returns the entry of the claim with this UID, or an error matching
// ErrNotFound.
func (c *Cache) Get(uid string) (Entry, error) {
	c.mu.RLock()
	r := c.entries[uid]
	c.mu.RUnlock()
	if r == nil {
		return Entry{}, notFound(uid)
	}
	return r.entry(c.bootID), nil
}

// Lookup returns the entry of the claim ref names. When ref's namespace and
// name are recorded under another UID the error is a *UIDMismatchError;
// when ref's UID is recorded under another name the error matches
// ErrInvalidArgument; when neither is recorded it matches ErrNotFound.
func (c *Cache) Lookup(ref ClaimRef) (Entry, error) {
	if err := ref.validate(); err != nil {
		return Entry{}, err
	}
	c.mu.RLock()
	r := c.entries[ref.UID]
	otherUID, named := c.byName[ref.nameKey()]
	c.mu.RUnlock()
	switch {
	case r != nil && r.ref() != ref:
		return Entry{}, invalidf("claim uid %s is recorded as %s/%s, not %s/%s", ref.UID, r.Namespace, r.Name, ref.Namespace, ref.Name)
	case r != nil:
		return r.entry(c.bootID), nil
	case named:
		return Entry{}, &UIDMismatchError{Namespace: ref.Namespace, Name: ref.Name, RecordedUID: otherUID, RequestedUID: ref.UID}
	}
	return Entry{}, notFound(ref.UID)
}

// LookupName returns the entry recorded under a namespace and name, whatever
// its UID, or an error matching ErrNotFound.
func (c *Cache) LookupName(namespace, name string) (Entry, error) {
	key := ClaimRef{Namespace: namespace, Name: name}.nameKey()
	c.mu.RLock()
	var r *record
	if uid, ok := c.byName[key]; ok {
		r = c.entries[uid]
	}
	c.mu.RUnlock()
	if r == nil {
		return Entry{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return r.entry(c.bootID), nil
}

// List returns every entry, sorted by namespace, name and UID.
func (c *Cache) List() []Entry {
	c.mu.RLock()
	recs := make([]*record, 0, len(c.entries))
	for _, r := range c.entries {
		recs = append(recs, r)
	}
	c.mu.RUnlock()
	out := make([]Entry, len(recs))
	for i, r := range recs {
		out[i] = r.entry(c.bootID)
	}
	sortEntries(out)
	return out
}

func sortEntries(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int { return compareRefs(a.Claim, b.Claim) })
}

// compareRefs orders claims by namespace, name and UID.
func compareRefs(a, b ClaimRef) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
}

// StartPrepare durably records that the claim is about to be prepared in
// the current boot, with podUID (if not empty) among its pods and the
// devices of the claim's unreleased Holds, so that they stay held if the
// process dies before the claim is prepared or unprepared. It is allowed
// for a new claim, for one left in PrepareStarted (a retry), and for a Stale
// Prepared claim (the node rebooted: prepare again). Devices recorded before
// are kept until FinishPrepare replaces them, so a failed prepare can still be
// unprepared. A claim already prepared in this boot, or being unprepared, is
// a *TransitionError; another UID under the same namespace and name is a
// *UIDMismatchError.
func (c *Cache) StartPrepare(ref ClaimRef, podUID string) (Entry, error) {
	if err := ref.validate(); err != nil {
		return Entry{}, err
	}
	unlockName := c.claimLocks.lock("name\x00" + ref.nameKey())
	defer unlockName()
	return c.change(ref.UID, OpStartPrepare, func(cur *record) (*record, error) {
		if err := c.checkName(ref, cur); err != nil {
			return nil, err
		}
		c.mu.RLock()
		held := c.heldDevicesLocked(ref)
		c.mu.RUnlock()
		if cur == nil {
			next := &record{Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID, State: PrepareStarted, BootID: c.bootID}
			if podUID != "" {
				next.addPod(podUID)
			}
			if held != nil {
				next.merge(held)
			}
			return next, nil
		}
		stale := cur.BootID != c.bootID
		switch {
		case cur.State == PrepareStarted, cur.State == Prepared && stale:
		default:
			return nil, &TransitionError{UID: ref.UID, From: cur.State, Stale: stale, Op: OpStartPrepare}
		}
		next := cur.clone()
		next.State = PrepareStarted
		next.BootID = c.bootID
		next.Uncertain = "" // being prepared now, keeping every device it may hold
		if podUID != "" {
			next.addPod(podUID)
		}
		if held != nil {
			next.merge(held)
		}
		return next, nil
	})
}

// checkName, called under the claim's name lock by operations that may
// record ref, refuses a namespace and name recorded under another UID
// (*UIDMismatchError) and a UID recorded under another name.
func (c *Cache) checkName(ref ClaimRef, cur *record) error {
	c.mu.RLock()
	owner, named := c.byName[ref.nameKey()]
	c.mu.RUnlock()
	switch {
	case named && owner != ref.UID:
		return &UIDMismatchError{Namespace: ref.Namespace, Name: ref.Name, RecordedUID: owner, RequestedUID: ref.UID}
	case cur != nil && cur.ref() != ref:
		return invalidf("claim uid %s is recorded as %s/%s, not %s/%s", ref.UID, cur.Namespace, cur.Name, ref.Namespace, ref.Name)
	}
	return nil
}

// FinishPrepare durably records what the drivers prepared (per driver name,
// the devices with their CDI device IDs) and moves the claim from
// PrepareStarted to Prepared. Only a claim whose StartPrepare ran in this
// boot can finish (an uncertain entry needs a StartPrepare first).
func (c *Cache) FinishPrepare(uid string, drivers map[string][]Device) (Entry, error) {
	if uid == "" {
		return Entry{}, invalidf("FinishPrepare: empty UID")
	}
	if err := validateDrivers(uid, drivers); err != nil {
		return Entry{}, err
	}
	return c.change(uid, OpFinishPrepare, func(cur *record) (*record, error) {
		if cur == nil {
			return nil, notFound(uid)
		}
		stale := cur.BootID != c.bootID
		// An uncertain entry is in PrepareStarted without a StartPrepare
		// having run for it.
		if cur.State != PrepareStarted || stale || cur.Uncertain != "" {
			return nil, &TransitionError{UID: uid, From: cur.State, Stale: stale, Op: OpFinishPrepare}
		}
		next := cur.clone()
		next.State = Prepared
		next.setDrivers(drivers)
		return next, nil
	})
}

// RecordPrepared durably records a claim that is not recorded as Prepared
// in the current boot, with what the drivers prepared (as FinishPrepare
// takes them), in one change instead of StartPrepare and FinishPrepare: for
// drivers whose Prepare leaves nothing on the node that an Unprepare would
// have to undo, where a crash before the change leaves nothing a
// PrepareStarted entry would have to tell of. A recorded UID is a
// *TransitionError (StartPrepare and FinishPrepare take it from there),
// a namespace and name recorded under another UID a *UIDMismatchError.
func (c *Cache) RecordPrepared(ref ClaimRef, drivers map[string][]Device) (Entry, error) {
	if err := ref.validate(); err != nil {
		return Entry{}, err
	}
	if err := validateDrivers(ref.UID, drivers); err != nil {
		return Entry{}, err
	}
	unlockName := c.claimLocks.lock("name\x00" + ref.nameKey())
	defer unlockName()
	return c.change(ref.UID, OpRecordPrepared, func(cur *record) (*record, error) {
		if err := c.checkName(ref, cur); err != nil {
			return nil, err
		}
		if cur != nil {
			return nil, &TransitionError{UID: ref.UID, From: cur.State, Stale: cur.BootID != c.bootID, Op: OpRecordPrepared}
		}
		next := &record{Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID, State: Prepared, BootID: c.bootID}
		next.setDrivers(drivers)
		return next, nil
	})
}

// StartUnprepare durably records that the claim is about to be unprepared
// and returns its entry, whose Drivers are what to hand each driver. It is
// allowed from every state and in every boot (a retry of an interrupted
// unprepare changes nothing); an unknown UID matches ErrNotFound, which an
// Unprepare call treats as done.
func (c *Cache) StartUnprepare(uid string) (Entry, error) {
	if uid == "" {
		return Entry{}, invalidf("StartUnprepare: empty UID")
	}
	return c.change(uid, OpStartUnprepare, func(cur *record) (*record, error) {
		if cur == nil {
			return nil, notFound(uid)
		}
		next := cur.clone()
		next.State = UnprepareStarted
		next.Uncertain = "" // on its way out, with every device it may hold
		return next, nil
	})
}

// Remove durably drops the entry of a claim in UnprepareStarted, once the
// drivers unprepared it.
func (c *Cache) Remove(uid string) error {
	return c.remove(uid, OpRemove, UnprepareStarted)
}

// RemovePrepared durably drops the entry of a Prepared claim (in any boot)
// in one change instead of StartUnprepare and Remove: for drivers whose
// Unprepare has nothing to undo, where a crash before the change leaves the
// claim Prepared for the next Unprepare. Other states are a
// *TransitionError.
func (c *Cache) RemovePrepared(uid string) error {
	return c.remove(uid, OpRemovePrepared, Prepared)
}

// remove durably drops the entry of a claim in state from.
func (c *Cache) remove(uid string, op Op, from State) error {
	if uid == "" {
		return invalidf("%s: empty UID", op)
	}
	_, err := c.change(uid, op, func(cur *record) (*record, error) {
		if cur == nil {
			return nil, notFound(uid)
		}
		if cur.State != from {
			return nil, &TransitionError{UID: uid, From: cur.State, Stale: cur.BootID != c.bootID, Op: op}
		}
		return nil, nil
	})
	return err
}

// AddPod durably adds a pod to the claim's references. It is allowed in
// PrepareStarted and Prepared; adding a pod already referenced writes
// nothing.
func (c *Cache) AddPod(uid, podUID string) (Entry, error) {
	if uid == "" || podUID == "" {
		return Entry{}, invalidf("AddPod: empty claim UID (%q) or pod UID (%q)", uid, podUID)
	}
	return c.change(uid, OpAddPod, func(cur *record) (*record, error) {
		if cur == nil {
			return nil, notFound(uid)
		}
		if cur.State == UnprepareStarted {
			return nil, &TransitionError{UID: uid, From: cur.State, Stale: cur.BootID != c.bootID, Op: OpAddPod}
		}
		next := cur.clone()
		next.addPod(podUID)
		return next, nil
	})
}

// RemovePod durably drops a pod from the claim's references, in any state;
// the returned entry tells whether any pod is left. Removing a pod that is
// not referenced writes nothing.
func (c *Cache) RemovePod(uid, podUID string) (Entry, error) {
	if uid == "" || podUID == "" {
		return Entry{}, invalidf("RemovePod: empty claim UID (%q) or pod UID (%q)", uid, podUID)
	}
	return c.change(uid, OpRemovePod, func(cur *record) (*record, error) {
		if cur == nil {
			return nil, notFound(uid)
		}
		next := cur.clone()
		next.removePod(podUID)
		return next, nil
	})
}

// WithClaim runs fn while holding the caller-level lock of the claim with
// this UID and returns fn's error. It serializes everything callers do for
// one claim across several calls (a kubelet Prepare and Unprepare of the
// same claim, or a retried Prepare: read the entry, call the driver, record
// the result) so that no two of them interleave; each Cache method on its
// own is already serialized per claim and needs no WithClaim. Calls for
// different UIDs run concurrently.
//
// fn may call any of the Cache's methods, including for uid (they use a
// separate lock). fn must not call WithClaim for the same uid: that
// deadlocks. The lock is not durable and is not held across processes, and
// WithClaim does not check that the claim is recorded or that the Cache is
// open. An empty uid or a nil fn is an error matching ErrInvalidArgument,
// and fn is not run. A lock exists only while someone holds or waits for
// it, and is released if fn panics.
func (c *Cache) WithClaim(uid string, fn func() error) error {
	if fn == nil {
		return invalidf("WithClaim %s: nil function", uid)
	}
	unlock, err := c.LockClaim(uid)
	if err != nil {
		return err
	}
	defer unlock()
	return fn()
}

// LockClaim takes the lock WithClaim holds while it runs its function, and
// returns the function that releases it, for a caller whose work under the
// lock reads better straight down than as a callback:
//
//	unlock, err := c.LockClaim(uid)
//	if err != nil { … }
//	defer unlock()
//
// What WithClaim says of the lock holds here: taking it again for the same
// uid before unlock deadlocks. An empty uid is an error matching
// ErrInvalidArgument. unlock must be called exactly once.
func (c *Cache) LockClaim(uid string) (unlock func(), err error) {
	if uid == "" {
		return nil, invalidf("LockClaim: empty UID")
	}
	return c.callerLocks.lock(uid), nil
}

// change runs one operation on one claim: under the claim's lock it decides
// the next record from the durable current one (nil: delete), makes it
// durable, and only then publishes it in memory.
func (c *Cache) change(uid string, op Op, decide func(cur *record) (next *record, err error)) (Entry, error) {
	unlock := c.claimLocks.lock("uid\x00" + uid)
	defer unlock()
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed {
		return Entry{}, fmt.Errorf("claimcache: %s %s: %w", op, uid, ErrClosed)
	}

	c.mu.RLock()
	cur := c.entries[uid]
	c.mu.RUnlock()
	next, err := decide(cur)
	if err != nil {
		return Entry{}, err
	}
	switch {
	case next == nil:
		if err := c.journal.Delete(uid); err != nil {
			return Entry{}, fmt.Errorf("claimcache: %s %s: %w", op, uid, err)
		}
	case cur != nil && cur.equal(next):
		return cur.entry(c.bootID), nil // nothing to make durable
	default:
		if err := c.journal.Put(uid, *next); err != nil {
			return Entry{}, fmt.Errorf("claimcache: %s %s: %w", op, uid, err)
		}
	}

	c.mu.Lock()
	if cur != nil {
		c.unindexLocked(cur)
	}
	if next == nil {
		delete(c.entries, uid)
		delete(c.byName, cur.ref().nameKey())
	} else {
		c.entries[uid] = next
		c.byName[next.ref().nameKey()] = uid
		c.indexLocked(next)
	}
	c.mu.Unlock()
	if next == nil {
		return Entry{}, nil
	}
	return next.entry(c.bootID), nil
}

// Gone lists the entries whose claim no longer exists according to exists
// (typically a lookup in the API server by namespace, name and UID). Its
// errors stop the listing and are returned wrapped.
func (c *Cache) Gone(exists func(ClaimRef) (bool, error)) ([]Entry, error) {
	recs, err := c.gone(exists)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, len(recs))
	for i, r := range recs {
		out[i] = r.entry(c.bootID)
	}
	sortEntries(out)
	return out, nil
}

func (c *Cache) gone(exists func(ClaimRef) (bool, error)) ([]*record, error) {
	c.mu.RLock()
	recs := make([]*record, 0, len(c.entries))
	for _, r := range c.entries {
		recs = append(recs, r)
	}
	c.mu.RUnlock()
	var gone []*record
	for _, r := range recs {
		ok, err := exists(r.ref())
		if err != nil {
			return nil, fmt.Errorf("claimcache: garbage collection: does %s exist: %w", r.ref(), err)
		}
		if !ok {
			gone = append(gone, r)
		}
	}
	return gone, nil
}

// DropGone durably removes, in one atomic batch, the entries whose claim no
// longer exists and returns them. It forgets devices without unpreparing
// them: use it for entries known to hold nothing (e.g. Stale ones after a
// reboot), and Gone followed by StartUnprepare, the driver and Remove for
// the rest. exists is called without any lock held; an entry changed by
// another operation meanwhile is kept and left to the next collection.
func (c *Cache) DropGone(exists func(ClaimRef) (bool, error)) ([]Entry, error) {
	candidates, err := c.gone(exists)
	if err != nil {
		return nil, err
	}
	// Lock in UID order: the only place that holds several claim locks.
	slices.SortFunc(candidates, func(a, b *record) int { return cmp.Compare(a.UID, b.UID) })
	for _, r := range candidates {
		unlock := c.claimLocks.lock("uid\x00" + r.UID)
		defer unlock()
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed {
		return nil, fmt.Errorf("claimcache: garbage collection: %w", ErrClosed)
	}
	var drop []*record
	var changes []checkpoint.Change[record]
	c.mu.RLock()
	for _, r := range candidates {
		if c.entries[r.UID] == r { // untouched since exists was asked
			drop = append(drop, r)
			changes = append(changes, checkpoint.Change[record]{Key: r.UID, Delete: true})
		}
	}
	c.mu.RUnlock()
	if len(changes) == 0 {
		return nil, nil
	}
	if err := c.journal.Commit(changes...); err != nil {
		return nil, fmt.Errorf("claimcache: garbage collection: drop %d entries: %w", len(changes), err)
	}
	out := make([]Entry, len(drop))
	c.mu.Lock()
	for i, r := range drop {
		delete(c.entries, r.UID)
		delete(c.byName, r.ref().nameKey())
		c.unindexLocked(r)
		out[i] = r.entry(c.bootID)
	}
	c.mu.Unlock()
	sortEntries(out)
	return out, nil
}
