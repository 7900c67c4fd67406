package checkpoint

import (
	"fmt"
	"time"

	"github.com/dranode/dranode/checkpoint/internal/jsonfast"
)

// Recovery says what OpenJournal did with damaged data under
// MoveCorruptAside. Everything stored before the first damage was restored;
// everything from the damage on was copied aside and is not part of the
// state. Journal.Recovery returns it; it is nil when nothing was damaged.
//
// Where the damage is decides what "before" means:
//
//   - In a log (a record that does not verify or parse and is not a torn
//     last append, a damaged log header, or a missing log generation): the
//     snapshot, the earlier logs and the records of the damaged log before
//     the damage are restored. The rest of that log and every later log are
//     the remainder.
//   - In the snapshot: its records before the damage are restored, the rest
//     of the snapshot is the remainder, and the logs are replayed on top of
//     what was restored. A log record is a whole value or a delete, never a
//     change relative to the snapshot, so a key a log touches is known
//     exactly whatever the snapshot held; a key only the lost part of the
//     snapshot held is not, which is what Unsure and Unreadable report. A
//     snapshot whose header cannot be read gives no generation: the logs
//     replayed are the run of consecutive generations that ends at the
//     newest one (replaying a log the snapshot already included rewrites
//     the same final values), and older logs are remainder too.
//
// Readable records in the remainder are never applied: in a log, records
// after damage may be old bytes a crash left in the file's tail, and
// records lost in the damage may lie between them and what was restored.
// They are listed in Unsure so that the caller can check each key against
// another source of truth.
type Recovery[V any] struct {
	// Damage is the first damage found: the file, the offset where the
	// trusted bytes end, and why.
	Damage *CorruptError
	// Kept is the number of records restored (snapshot records plus log
	// records).
	Kept int
	// Aside lists the copies of the remainder, one per file, in journal
	// order. The damaged files themselves are replaced by a new snapshot of
	// the restored state before OpenJournal returns.
	Aside []AsideCopy
	// Unsure lists every change that could be read from the remainder, in
	// journal order, except those to keys a restored log record settles
	// (see above). None of them is applied.
	Unsure []UnsureChange[V]
	// Unreadable is the number of remainder bytes that are neither a
	// readable file header nor a record that verifies and parses: changes
	// to keys nobody can name may have been in them.
	Unreadable int64
	// Lost describes, for people, data known to have been stored that left
	// no bytes to read: a missing log generation, a log shorter than the
	// next log's header says it was, snapshot records the header counts
	// but the file does not hold. Changes to any key may have been in it.
	Lost []string
	// RestoredUnsure reports that changes that could not be read (damage
	// in a log with Unreadable bytes, or Lost log data) came after restored
	// records, so any restored key may have been changed by them. When
	// false, every restored key is exact, and only keys in Unsure or never
	// restored are in doubt: damage confined to the snapshot, whose records
	// hold one key each, and whose logs are replayed in full.
	RestoredUnsure bool
}

// Complete reports whether every change stored after the damage could be
// read, so that Unsure names every key the damage may have affected.
func (r *Recovery[V]) Complete() bool { return r.Unreadable == 0 && len(r.Lost) == 0 }

// AsideCopy is one file's untrusted remainder, copied next to it.
type AsideCopy struct {
	From   string // the journal file the bytes came from
	Offset int64  // where in From they start (0: the whole file)
	Bytes  int64  // how many; the copy holds exactly From[Offset:]
	Path   string // the copy: <From>.corrupt-<UTC timestamp>
}

// UnsureChange is a change read from the remainder of a damaged journal: it
// verified, but whether it is the key's last change is unknown.
type UnsureChange[V any] struct {
	Key    string
	Delete bool
	// Value is the decoded value of a put; ValueErr says why it could not
	// be decoded (Value is then the zero value).
	Value    V
	ValueErr error
	Path     string // the file the record is in
	Offset   int64  // the offset of its frame
}

// remainder is the untrusted part of one file: data[off:].
type remainder struct {
	path  string
	magic string
	data  []byte
	off   int
	// version is the format version of the file's records, or -1 when its
	// header could not be read (values are then decoded as the current
	// version).
	version int
	// beforeLogs: the file precedes the replayed logs (the snapshot, or a
	// log older than a damaged snapshot's run), so a key they touch is
	// settled.
	beforeLogs bool
	// records is the number of records the remainder should hold, when
	// known (a snapshot's header counts them), else -1.
	records int
}

// recovery collects what restore found after the first damage.
type recovery struct {
	damage *CorruptError
	rest   []remainder
	lost   []string
}

func (r *recovery) found(err *CorruptError) {
	if r.damage == nil {
		r.damage = err
	}
}

// report reads what can be read from the remainder. settled holds the keys
// restored log records touched.
func (j *Journal[V]) report(r *recovery, kept int, settled map[string]bool) *Recovery[V] {
	out := &Recovery[V]{Damage: r.damage, Kept: kept, Lost: r.lost, RestoredUnsure: len(r.lost) > 0}
	var dec jsonfast.Decoder
	for _, rem := range r.rest {
		start, version := rem.off, rem.version
		if start == 0 {
			// A whole file: its readable header is not lost data.
			if h, next, err := readHeader(rem.path, rem.data, rem.magic, j.schema); err == nil {
				start, version = next, h.Version
			} else {
				// Without it, nothing says how much the file held.
				out.Lost = append(out.Lost, fmt.Sprintf("%s: header unreadable, so what the file held is unknown", rem.path))
				out.RestoredUnsure = out.RestoredUnsure || !rem.beforeLogs
			}
		}
		readable := 0
		unreadable := scanRecords(rem.data, start, func(payload []byte, at int) {
			readable++
			_ = parseRecord(payload, func(key, value []byte, del bool) {
				if rem.beforeLogs && settled[string(key)] {
					return
				}
				u := UnsureChange[V]{Key: string(key), Delete: del, Path: rem.path, Offset: int64(at)}
				if !del {
					u.ValueErr = j.decodeUnsure(&dec, rem.path, version, value, &u.Value)
				}
				out.Unsure = append(out.Unsure, u)
			})
		})
		out.Unreadable += unreadable
		out.RestoredUnsure = out.RestoredUnsure || (unreadable > 0 && !rem.beforeLogs)
		if rem.records > readable {
			out.Lost = append(out.Lost, fmt.Sprintf("%s: %d of the %d records from offset %d on could not be read", rem.path, rem.records-readable, rem.records, rem.off))
		}
	}
	return out
}

func (j *Journal[V]) decodeUnsure(dec *jsonfast.Decoder, path string, version int, raw []byte, v *V) error {
	if version >= 0 && version < j.schema.Version {
		up, err := j.schema.upgrade(path, version, raw)
		if err != nil {
			return err
		}
		raw = up
	}
	return dec.Unmarshal(raw, v)
}

// scanRecords calls fn for every frame at or after off that verifies and
// holds a record that parses, resynchronising byte by byte after anything
// else, and returns the number of bytes in no such frame. Its work is linear
// in the bytes scanned, however many of them claim to start a frame (see
// frameSearch), plus the parsing of the frames that verify.
func scanRecords(data []byte, off int, fn func(payload []byte, at int)) (unreadable int64) {
	s := newFrameSearch(data, off)
	p := off // the first byte not yet counted
	for q := off; ; {
		at, payload, next, ok := s.next(q)
		if !ok {
			break
		}
		if parseRecord(payload, func([]byte, []byte, bool) {}) != nil {
			q = at + 1
			continue
		}
		unreadable += int64(at - p)
		fn(payload, at)
		p, q = next, next
	}
	return unreadable + int64(max(len(data)-p, 0))
}

// copyAside writes each remainder to <file>.corrupt-<timestamp>, durably,
// before anything in the journal changes: a crash before the new snapshot
// replaces the damaged files finds them as they were and recovers again.
func (j *Journal[V]) copyAside(r *Recovery[V], rest []remainder, now time.Time) error {
	for _, rem := range rest {
		if rem.off == len(rem.data) {
			continue // the damage is what is missing, not bytes to keep
		}
		aside := asideName(rem.path, now)
		if err := writeFile(aside, rem.data[rem.off:], &j.fsyncs); err != nil {
			return fmt.Errorf("checkpoint: copy damaged journal data aside: %w", err)
		}
		r.Aside = append(r.Aside, AsideCopy{From: rem.path, Offset: int64(rem.off), Bytes: int64(len(rem.data) - rem.off), Path: aside})
	}
	return nil
}
