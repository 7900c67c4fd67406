package checkpoint

import "encoding/json"

// CorruptPolicy decides what opening or loading does with corrupt data.
type CorruptPolicy int

const (
	// FailOnCorrupt returns a *CorruptError and leaves the bytes alone. A
	// File under this policy also refuses to Save over a corrupt file.
	FailOnCorrupt CorruptPolicy = iota
	// MoveCorruptAside keeps the evidence next to the store and goes on
	// with what can be trusted. A File's corrupt document is renamed to
	// <name>.corrupt-<timestamp> in the same directory and the File starts
	// empty. A Journal keeps every record stored before the damage, copies
	// everything from the damage on to <file>.corrupt-<timestamp> and
	// reports it (Journal.Recovery). Nothing is deleted before it is
	// copied. Files of a newer format version are never moved: they are
	// not corrupt.
	MoveCorruptAside
)

func (p CorruptPolicy) String() string {
	switch p {
	case FailOnCorrupt:
		return "FailOnCorrupt"
	case MoveCorruptAside:
		return "MoveCorruptAside"
	}
	return "CorruptPolicy(?)"
}

// Option configures OpenFile and OpenJournal.
type Option func(*options)

type options struct {
	corrupt CorruptPolicy
	// Journal compaction: compact when the live log exceeds
	// max(compactMinBytes, compactRatio × live state bytes).
	compactMinBytes int64
	compactRatio    int64
	// File only: also write a copy readable by the previous format version.
	downgrade func(json.RawMessage) (json.RawMessage, error)
}

func buildOptions(opts []Option) options {
	o := options{corrupt: FailOnCorrupt, compactMinBytes: 1 << 20, compactRatio: 2}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithCorruptPolicy selects what happens to corrupt data; FailOnCorrupt is
// the default.
func WithCorruptPolicy(p CorruptPolicy) Option {
	return func(o *options) { o.corrupt = p }
}

// WithCompaction tunes when a Journal folds its log into a new snapshot: once
// the log is larger than both minBytes and ratio times the encoded size of
// the live state. Because a compaction costs about the size of the state and
// happens only after at least ratio × that many bytes were appended, the
// amortized cost per change stays constant however large the state is.
// Defaults: 1 MiB and 2. Values below 1 are raised to 1.
func WithCompaction(minBytes int64, ratio int) Option {
	return func(o *options) {
		o.compactMinBytes = max(minBytes, 1)
		o.compactRatio = int64(max(ratio, 1))
	}
}

// WithDowngradeCopy makes File.Save also write <path>.v<N-1>, a copy in the
// previous format version N-1 produced by down (the inverse of the
// Migrations[N-1] step), bound to the main file by its checksum. A release
// that supports only version N-1 and finds the main file newer loads the
// copy instead of failing, as long as the copy belongs to exactly the main
// file on disk. It has no effect when the schema's version is 1.
func WithDowngradeCopy(down func(json.RawMessage) (json.RawMessage, error)) Option {
	return func(o *options) { o.downgrade = down }
}
