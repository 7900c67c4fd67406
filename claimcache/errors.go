package claimcache

import (
	"errors"
	"fmt"
)

// Sentinels; every error this package returns for one of these conditions
// matches it with errors.Is.
var (
	// ErrNotFound: no entry is recorded for the claim.
	ErrNotFound = errors.New("claimcache: claim not recorded")
	// ErrIllegalTransition: the operation is not allowed from the claim's
	// recorded state. The error is a *TransitionError.
	ErrIllegalTransition = errors.New("claimcache: illegal state transition")
	// ErrUIDMismatch: a claim with the requested namespace and name is
	// recorded under another UID. The error is a *UIDMismatchError.
	ErrUIDMismatch = errors.New("claimcache: claim recorded with another UID")
	// ErrInvalidArgument: the caller passed an empty UID, an unnamed driver
	// or something else the record cannot hold.
	ErrInvalidArgument = errors.New("claimcache: invalid argument")
	// ErrBadRecord: a stored record cannot be understood (restore refuses to
	// guess, so that no state is silently dropped).
	ErrBadRecord = errors.New("claimcache: bad stored record")
	// ErrClosed: the Cache was closed.
	ErrClosed = errors.New("claimcache: cache closed")
)

// Op names a state-changing operation, for errors.
type Op string

// The operations that change a claim's entry.
const (
	OpStartPrepare    Op = "StartPrepare"
	OpFinishPrepare   Op = "FinishPrepare"
	OpStartUnprepare  Op = "StartUnprepare"
	OpRemove          Op = "Remove"
	OpAddPod          Op = "AddPod"
	OpRemovePod       Op = "RemovePod"
	OpRecordUncertain Op = "RecordUncertain"
	OpRecordPrepared  Op = "RecordPrepared"
	OpRemovePrepared  Op = "RemovePrepared"
)

// TransitionError reports an operation that the claim's recorded state does
// not allow. It matches ErrIllegalTransition.
type TransitionError struct {
	UID   string
	From  State
	Stale bool // From was recorded in an earlier boot
	Op    Op
}

func (e *TransitionError) Error() string {
	from := string(e.From)
	if e.Stale {
		from += " (recorded in an earlier boot)"
	}
	return fmt.Sprintf("claimcache: claim %s: %s is not allowed in state %s%s", e.UID, e.Op, from, transitionHint(e.Op, e.From, e.Stale))
}

// Is makes errors.Is(err, ErrIllegalTransition) true.
func (e *TransitionError) Is(target error) bool { return target == ErrIllegalTransition }

// transitionHint says what the caller should have done instead.
func transitionHint(op Op, from State, stale bool) string {
	switch {
	case op == OpStartPrepare && from == Prepared:
		return "; the claim is already prepared in this boot: use its recorded CDI device IDs"
	case op == OpStartPrepare && from == UnprepareStarted:
		return "; finish the unprepare (StartUnprepare, driver, Remove) first"
	case op == OpFinishPrepare && from == PrepareStarted && stale:
		return "; the node rebooted since StartPrepare: call StartPrepare again"
	case op == OpFinishPrepare:
		return "; FinishPrepare must follow StartPrepare"
	case op == OpRemove:
		return "; Remove must follow StartUnprepare"
	case op == OpAddPod:
		return "; the claim is being unprepared"
	case op == OpRecordPrepared:
		return "; only a claim not recorded can be recorded as prepared at once: StartPrepare and FinishPrepare take a recorded one"
	case op == OpRemovePrepared:
		return "; only a Prepared claim can be removed at once: StartUnprepare, the drivers, Remove otherwise"
	case op == OpRecordUncertain:
		return "; the claim's state is known: only a claim not recorded, or recorded as uncertain, can be recorded as uncertain"
	}
	return ""
}

// UIDMismatchError reports that the namespace and name asked for belong to a
// recorded claim with another UID: typically the old claim of a force-deleted
// pod, which still has to be unprepared. It matches ErrUIDMismatch.
type UIDMismatchError struct {
	Namespace, Name string
	RecordedUID     string
	RequestedUID    string
}

func (e *UIDMismatchError) Error() string {
	return fmt.Sprintf("claimcache: claim %s/%s: uid %s requested but uid %s is recorded (an older claim with the same name, still to be unprepared)",
		e.Namespace, e.Name, e.RequestedUID, e.RecordedUID)
}

// Is makes errors.Is(err, ErrUIDMismatch) true.
func (e *UIDMismatchError) Is(target error) bool { return target == ErrUIDMismatch }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

func notFound(uid string) error {
	return fmt.Errorf("%w: uid %s", ErrNotFound, uid)
}
