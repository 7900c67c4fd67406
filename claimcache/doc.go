// Package claimcache is the durable record of the ResourceClaims a node agent
// has prepared: per claim its state, the devices and CDI device IDs per
// driver, the pods that use it and the boot it was prepared in. Every change
// is durable before the call that made it returns.
//
// # Lifecycle
//
// A claim's entry goes PrepareStarted → Prepared → UnprepareStarted →
// removed:
//
//	StartPrepare     new, PrepareStarted, or Prepared in an earlier boot → PrepareStarted
//	FinishPrepare    PrepareStarted (this boot, not uncertain)           → Prepared
//	StartUnprepare   any state                                           → UnprepareStarted
//	Remove           UnprepareStarted                                    → removed
//	AddPod           PrepareStarted, Prepared                            → unchanged
//	RemovePod        any state                                           → unchanged
//	RecordUncertain  new, or uncertain                                   → PrepareStarted, uncertain
//
// For drivers whose Prepare leaves nothing on the node for an Unprepare to
// undo, two shortcuts take one change where the lifecycle takes two:
//
//	RecordPrepared   new                                                 → Prepared
//	RemovePrepared   Prepared (any boot)                                 → removed
//
// Anything else is a *TransitionError (errors.Is ErrIllegalTransition) and
// changes nothing. A state is entered before the driver is called, so after
// a crash PrepareStarted means "the driver may have prepared part of it" and
// UnprepareStarted "the driver may have unprepared part of it"; Open lists
// such entries in RestoreReport.Interrupted for the caller to roll back or
// finish.
//
// # Damage and uncertain claims
//
// A damaged record is refused by default (a *checkpoint.CorruptError; nothing
// changes). With checkpoint.MoveCorruptAside passed through
// WithJournalOptions, Open restores every change stored before the damage,
// keeps the rest aside for inspection, and does not forget the claims the
// lost changes may have touched: every claim that a readable change after
// the damage names (and every restored claim, when a change after them
// cannot be read) becomes an uncertain entry (Entry.Uncertain): in
// PrepareStarted, holding every device the record and those changes name
// for it, durable before Open returns. RestoreReport.Damage says what
// happened, RestoreReport.Uncertain lists the uncertain entries (at every
// Open until they are settled). The caller logs and counts them and
// reconciles each against the kubelet's own DRA checkpoint and the API
// server (see Damage for the rules; Cache.Reconcile applies them); when
// Damage.Unknown says changes were lost that nobody can read, it records
// the claims and devices only the kubelet still knows with RecordUncertain. StartPrepare and StartUnprepare settle an
// uncertain entry; it is never rolled back merely for being in
// PrepareStarted, because it may be in use.
//
// # One claim per device
//
// A device is held by every claim the record names it for, in every state
// and boot, and by every unreleased Hold. Hold checks that no other claim
// holds a device of an allocation and holds it, in one step, before the
// driver touches it; StartPrepare records the held devices, so a crash
// keeps them held; a failed unprepare leaves the claim in UnprepareStarted,
// holding them. Admin access, and distinct shares of a device published
// with allowMultipleAllocations, do not conflict. Devices of different
// names that consume the same counters (a whole GPU and its partitions)
// conflict when, with what the devices other claims hold consume, they
// pass a counter's published value. A conflict is a *DeviceInUseError
// (errors.Is ErrDeviceInUse) naming the device and the holder. The holders
// are an index in memory, rebuilt by Open.
//
// # Reboots
//
// Every entry records the boot ID of its last StartPrepare. When the Cache is
// opened in another boot, those entries are Stale: device state and the CDI
// specs under /var/run/cdi did not survive, so Entry.PreparedInCurrentBoot is
// false and StartPrepare is allowed again, while the entry keeps its devices
// for an Unprepare. Nothing is rewritten at Open: staleness is the boot ID
// comparison, so it holds across any number of restarts until the claim is
// prepared again.
//
// # Names and UIDs
//
// Entries are found by UID (Get) and by namespace/name (LookupName, Lookup).
// A namespace/name recorded under another UID — the old claim of a
// force-deleted pod, recreated before it was unprepared — is a
// *UIDMismatchError from Lookup and StartPrepare: the old claim has to be
// unprepared first.
//
// # Concurrency
//
// Operations on different claims run in parallel, and the journal's group
// commit lets them share fsyncs. Operations on one claim are serialized by a
// per-UID lock that exists only while it is in use, and each is checked
// against the claim's durable state. Returned Entries are copies.
//
// A caller's work on one claim spans several calls (look up, StartPrepare,
// call the driver, FinishPrepare); WithClaim runs it under a second,
// caller-level per-UID lock so that a Prepare and an Unprepare of the same
// claim never interleave.
//
// # Storage
//
// The record is a checkpoint.Journal keyed by claim UID, so a change costs
// one appended record however many claims are recorded. The stored format is
// versioned through checkpoint migrations: format FormatVersion (1) is
// written; format 0, the prototype layout, is upgraded on Open (see
// testdata/).
package claimcache
