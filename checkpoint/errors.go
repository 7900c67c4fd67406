package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
)

// Sentinel errors. Every error the package returns for these conditions
// matches the sentinel with errors.Is, and the richer types below with
// errors.As.
var (
	// ErrCorrupt matches every *CorruptError.
	ErrCorrupt = errors.New("checkpoint: corrupt")
	// ErrNewerVersion matches every *NewerVersionError.
	ErrNewerVersion = errors.New("checkpoint: written by a newer format version")
	// ErrLocked means another process (or another File or Journal in this
	// process) holds the lock on the same path.
	ErrLocked = errors.New("checkpoint: locked by another holder")
	// ErrClosed is returned by calls on a closed File or Journal.
	ErrClosed = errors.New("checkpoint: closed")
	// ErrInvalidSchema is returned when a Schema cannot describe stored data
	// (empty kind, Version below 1, a migration from a negative version or
	// from one that is not older than the current one).
	ErrInvalidSchema = errors.New("checkpoint: invalid schema")
	// ErrInvalidKey is returned for an empty journal key.
	ErrInvalidKey = errors.New("checkpoint: invalid key")
	// ErrMigration matches every *MigrationError.
	ErrMigration = errors.New("checkpoint: migration failed")
)

// CorruptError reports stored bytes that cannot be trusted: truncated, a
// checksum mismatch, undecodable JSON, a file of another kind, or a record
// in the middle of a journal log that does not verify.
type CorruptError struct {
	Path   string // the file that failed; empty for bytes decoded without one
	Offset int64  // byte offset of the failing frame or field (0 when the whole file is at fault)
	Reason string // what failed, for people
	Err    error  // underlying error, if any
}

func (e *CorruptError) Error() string {
	where := e.Path
	if where == "" {
		where = "data" // bytes decoded without a file, e.g. by kubeletcompat's Decode functions
	}
	msg := fmt.Sprintf("checkpoint: corrupt %s at offset %d: %s", where, e.Offset, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func (e *CorruptError) Unwrap() error { return e.Err }

// NewerVersionError reports a file written by a format version this code
// does not know. Such a file is never modified, moved or deleted.
type NewerVersionError struct {
	Path    string
	Kind    string
	Version int // the version found in the file (math.MaxInt when it does not fit an int; see Stored)
	// Stored is the version exactly as the header spells it, set only when
	// it is too large for Version.
	Stored    string
	Supported int // the newest version this code reads
}

func (e *NewerVersionError) Error() string {
	v := strconv.Itoa(e.Version)
	if e.Stored != "" {
		v = e.Stored
	}
	return fmt.Sprintf("checkpoint: %s holds %s format version %s, newer than the supported version %d; refusing to read or overwrite it",
		e.Path, e.Kind, v, e.Supported)
}

// Is makes errors.Is(err, ErrNewerVersion) true.
func (e *NewerVersionError) Is(target error) bool { return target == ErrNewerVersion }

// MigrationError reports a migration step that failed or is missing.
type MigrationError struct {
	Path string
	Kind string
	From int // the version the failing step starts from
	Err  error
}

func (e *MigrationError) Error() string {
	return fmt.Sprintf("checkpoint: migrate %s (%s) from version %d to %d: %v", e.Path, e.Kind, e.From, e.From+1, e.Err)
}

// Is makes errors.Is(err, ErrMigration) true.
func (e *MigrationError) Is(target error) bool { return target == ErrMigration }

func (e *MigrationError) Unwrap() error { return e.Err }

// MovedAsideError is what File.Load returns under MoveCorruptAside after it
// renamed a corrupt file out of the way: the store is now empty, so the error
// matches fs.ErrNotExist (callers that start fresh on a missing file need no
// extra case), and Cause says what was wrong.
type MovedAsideError struct {
	Path  string        // the store's path, now absent
	Aside string        // where the corrupt bytes were moved
	Cause *CorruptError // why
}

func (e *MovedAsideError) Error() string {
	return fmt.Sprintf("checkpoint: moved corrupt %s aside to %s (%v); starting empty", e.Path, e.Aside, e.Cause)
}

// Is makes errors.Is(err, fs.ErrNotExist) true.
func (e *MovedAsideError) Is(target error) bool { return target == fs.ErrNotExist }
