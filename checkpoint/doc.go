// Package checkpoint stores versioned, checksummed, crash-safe state files: a
// single-document store with migrations between format versions, and an
// append-only journal with group commit whose cost per change does not grow
// with the state.
//
// Both write the same framing: an 8-byte magic, then frames of a 4-byte
// length, a 4-byte CRC-32C of the payload and the payload, the first frame
// being a JSON header with the kind and the format version. The checksum
// covers the exact stored bytes, so adding a field to a Go type never
// invalidates existing files, and any language can verify them (the module
// README describes the format byte by byte).
//
// [File] holds one document. [File.Load] upgrades older format versions in
// memory with the [Schema]'s migrations; [File.Save] writes the current
// version durably (temporary file, fsync, rename, directory fsync), through
// package [github.com/dranode/dranode/checkpoint/durable], which other
// modules use for the same job.
//
// [Journal] holds a map of keys to values as a snapshot plus a log. Each
// [Journal.Commit] appends one checksummed record and returns after the
// fsync that covers it; concurrent commits share fsyncs. When the log
// outgrows the state it is compacted into a new snapshot in the background.
//
// Data written by a newer format version, however large the version, is
// refused with a [*NewerVersionError] and never modified. Corrupt data
// gives a [*CorruptError]. With [MoveCorruptAside], a corrupt File is
// renamed out of the way instead, never deleted; a damaged Journal keeps
// every record stored before the damage, copies the rest aside and reports
// what it did, including the changes it could still read but did not apply
// ([Journal.Recovery]). Both File and Journal take an exclusive flock so
// that two processes cannot write the same state.
//
// The package depends on the standard library only.
package checkpoint
