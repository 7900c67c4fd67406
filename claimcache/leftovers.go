package claimcache

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrNotLeftover is returned by CleanLeftover when the entry, checked again
// under its claim's lock, is not a leftover any more (the kubelet lists it
// again, or it changed); nothing was done.
var ErrNotLeftover = errors.New("claimcache: entry is not a leftover any more")

// LeftoverReason says why no kubelet will ever unprepare an entry. Its
// values are stable: metrics and tools use them as labels.
type LeftoverReason string

const (
	// ReasonClaimDeleted: the API server has no claim of this namespace
	// and name.
	ReasonClaimDeleted LeftoverReason = "claim-deleted"
	// ReasonClaimRecreated: the claim's namespace and name belong to
	// another UID now (deleted and created again).
	ReasonClaimRecreated LeftoverReason = "claim-recreated"
	// ReasonClaimUnreserved: the claim exists with this UID but no pod
	// may use it (no allocation, or an empty status.reservedFor): the
	// pods it was prepared for are gone.
	ReasonClaimUnreserved LeftoverReason = "claim-unreserved"
)

// APIClaim is what the API server says about the namespace and name of a
// recorded claim.
type APIClaim struct {
	// Exists: a claim of this namespace and name exists.
	Exists bool
	// UID of the claim that exists.
	UID string
	// Reserved: the claim is allocated and its status.reservedFor names
	// at least one consumer.
	Reserved bool
}

// ClassifyLeftover decides whether e is a leftover: an entry no kubelet
// will ever unprepare. listedByKubelet says whether the kubelet's own DRA
// checkpoint lists e's UID (for any driver); api is what the API server
// says about e's namespace and name. It returns the reason, or "" when e
// is not a leftover.
//
// A claim the kubelet lists is never a leftover, whatever the API server
// says: the kubelet will call Unprepare for it (its pod may be running,
// force-deleted or not). Otherwise the entry is a leftover when the
// API server has no such claim, has it under another UID, or has it with
// no consumer reserved. A claim that exists and is reserved is not: a pod
// the kubelet lost track of may still use its devices.
func ClassifyLeftover(e Entry, listedByKubelet bool, api APIClaim) LeftoverReason {
	switch {
	case listedByKubelet:
		return ""
	case !api.Exists:
		return ReasonClaimDeleted
	case api.UID != e.Claim.UID:
		return ReasonClaimRecreated
	case !api.Reserved:
		return ReasonClaimUnreserved
	}
	return ""
}

// Leftover is one entry no kubelet will unprepare.
type Leftover struct {
	Entry  Entry
	Reason LeftoverReason
	// Since is when the entry was first seen as a leftover by this
	// LeftoverTracker (continuously since; see LeftoverTracker).
	Since time.Time
	// Due: the grace period has passed since Since; clean it.
	Due bool
}

// LeftoverReport is what one LeftoverTracker.Find found.
type LeftoverReport struct {
	// Leftovers, due or not, sorted by namespace, name and UID.
	Leftovers []Leftover
	// Kept counts the entries checked that are not leftovers.
	Kept int
	// Errors, one *CheckError per entry that could not be checked (its
	// API lookup failed); such an entry is neither a leftover nor kept
	// this time.
	Errors []error
}

// CheckError is the error LeftoverTracker.Find reports for an entry whose
// API lookup failed.
type CheckError struct {
	Entry Entry
	Err   error
}

func (e *CheckError) Error() string {
	return fmt.Sprintf("claimcache: finding leftovers: %s: %v", e.Entry.Claim, e.Err)
}

// Unwrap returns Err.
func (e *CheckError) Unwrap() error { return e.Err }

// LeftoverSource is what Find needs from outside the record.
type LeftoverSource struct {
	// Kubelet returns the UIDs of every claim the kubelet's DRA
	// checkpoint lists, for any driver. An error stops Find: without the
	// kubelet's list, a claim in use cannot be told from a leftover.
	Kubelet func() (map[string]bool, error)
	// Lookup asks the API server about a claim's namespace and name.
	Lookup func(ClaimRef) (APIClaim, error)
}

// LeftoverTracker finds the leftovers of a Cache and remembers, in memory,
// since when each has been one: the grace period runs from the first Find
// that saw an entry as a leftover, and starts again if a later Find does
// not (the kubelet lists it again, or a lookup failed). A new tracker —
// after a restart of the process — starts every grace period afresh, so a
// restart delays cleaning by up to one grace period and never hastens it.
// The zero value is ready to use; methods are safe for concurrent use.
type LeftoverTracker struct {
	mu    sync.Mutex
	since map[string]time.Time // by UID
}

// Find checks every entry of c (see ClassifyLeftover) and reports the
// leftovers; those seen as leftovers for at least grace are Due. The record
// is listed before the kubelet's checkpoint is read, so that an entry
// recorded for a kubelet call is always checked against a checkpoint at
// least as new as the call (the kubelet writes its checkpoint before it
// calls the driver). A Kubelet error is returned and nothing is reported.
func (t *LeftoverTracker) Find(c *Cache, src LeftoverSource, now time.Time, grace time.Duration) (LeftoverReport, error) {
	entries := c.List()
	listed, err := src.Kubelet()
	if err != nil {
		return LeftoverReport{}, fmt.Errorf("claimcache: finding leftovers: the kubelet's checkpoint: %w", err)
	}
	var rep LeftoverReport
	seen := map[string]time.Time{}
	for _, e := range entries {
		if listed[e.Claim.UID] {
			rep.Kept++
			continue
		}
		api, err := src.Lookup(e.Claim)
		if err != nil {
			rep.Errors = append(rep.Errors, &CheckError{Entry: e, Err: err})
			continue
		}
		reason := ClassifyLeftover(e, false, api)
		if reason == "" {
			rep.Kept++
			continue
		}
		t.mu.Lock()
		since, ok := t.since[e.Claim.UID]
		t.mu.Unlock()
		if !ok {
			since = now
		}
		seen[e.Claim.UID] = since
		rep.Leftovers = append(rep.Leftovers, Leftover{Entry: e, Reason: reason, Since: since, Due: now.Sub(since) >= grace})
	}
	t.mu.Lock()
	t.since = seen
	t.mu.Unlock()
	return rep, nil
}

// Forget drops what the tracker remembers of a UID (after cleaning it).
func (t *LeftoverTracker) Forget(uid string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.since, uid)
}

// CleanLeftover unprepares and removes a leftover Find reported, holding
// the claim's WithClaim lock (so no Prepare or Unprepare of the claim runs
// meanwhile): it reads the entry again, asks still whether it is still a
// leftover (the caller reads the kubelet's checkpoint again: the kubelet
// may have started to prepare the claim since Find), and only then records
// UnprepareStarted, calls unprepare with the entry (the drivers undo what
// they prepared) and removes it. An entry that is gone already is
// ErrNotFound; one still returns false for is ErrNotLeftover, and nothing
// changes. If unprepare fails the entry stays in UnprepareStarted, which
// the next Unprepare call or restart finishes. It returns the entry as
// handed to unprepare.
func (c *Cache) CleanLeftover(l Leftover, still func(Entry) (bool, error), unprepare func(Entry) error) (Entry, error) {
	if still == nil || unprepare == nil {
		return Entry{}, invalidf("CleanLeftover %s: nil function", l.Entry.Claim.UID)
	}
	uid := l.Entry.Claim.UID
	var out Entry
	err := c.WithClaim(uid, func() error {
		cur, err := c.Get(uid)
		if err != nil {
			return err
		}
		ok, err := still(cur)
		if err != nil {
			return fmt.Errorf("claimcache: clean leftover %s: %w", cur.Claim, err)
		}
		if !ok {
			return fmt.Errorf("%w: %s", ErrNotLeftover, cur.Claim)
		}
		if out, err = c.StartUnprepare(uid); err != nil {
			return err
		}
		if err := unprepare(out); err != nil {
			return fmt.Errorf("claimcache: clean leftover %s: unprepare: %w", cur.Claim, err)
		}
		return c.Remove(uid)
	})
	return out, err
}
