package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dranode/dranode/checkpoint/internal/jsonfast"
)

// Change is one step of an atomic Commit: a put of Value under Key, or, with
// Delete set, the removal of Key (Value is ignored).
type Change[V any] struct {
	Key    string
	Value  V
	Delete bool
}

// Journal is a durable map from string keys to values of type V, stored in
// one directory as a snapshot file plus an append-only log. A change costs
// one small append and one fsync shared with every change committed at the
// same moment (group commit), however many keys are stored. It is safe for
// concurrent use.
//
// When the log outgrows the state (see WithCompaction), the committer that
// notices it starts a new log (two small fsyncs, under the commit lock: a
// brief pause for other committers) and a background goroutine writes the
// new snapshot and removes the old log; commits go on meanwhile.
type Journal[V any] struct {
	dir    string
	schema Schema
	opts   options
	lock   *Lock
	fsyncs atomic.Uint64

	mu    sync.Mutex
	cond  sync.Cond
	state map[string]slot[V]
	live  int64 // encoded size of the state: what a snapshot would take

	log     *os.File
	logGen  uint64
	logSize int64

	enqueued atomic.Uint64 // commits queued since open, read without mu by a leader
	// beforeFlush, in tests, runs when a leader starts a flush, before
	// it takes the batch (j.mu not held).
	beforeFlush func()
	pending     []byte       // frames of the batch that is filling up
	spare       []byte       // the buffer of the last batch, for reuse
	pendOps     []encoded[V] // its changes, applied once durable
	pendSeq     uint64       // number of the batch that is filling up
	doneSeq     uint64       // every batch up to this one is durable
	flushing    bool         // a leader is writing a batch
	failed      error        // a write or fsync failed; the journal is unusable
	closing     bool
	closed      bool

	compacting  bool
	compactDone chan struct{}
	compactErr  error

	recovery *Recovery[V] // set once by restore, read-only after
}

type slot[V any] struct {
	raw   []byte // the value's JSON exactly as stored; compaction copies it
	value V
}

type encoded[V any] struct {
	key   string
	del   bool
	raw   []byte
	value V
}

const (
	snapshotName = "snapshot"
	logPrefix    = "log."
	lockName     = "lock"
)

// OpenJournal opens (creating if needed, mode 0700) the journal in dir,
// takes an exclusive lock on dir/lock and restores the state: the snapshot,
// then every log after it. A torn last record, left by a crash during an
// append that was never acknowledged, is detected and cut off; damage
// anywhere else is a *CorruptError that leaves every file as it was. Under
// MoveCorruptAside, every record stored before the first damage is restored
// instead, the rest is copied to <file>.corrupt-<timestamp> and a snapshot
// of what was restored replaces the damaged files: Recovery says what was
// kept, what was copied aside and which changes it held. Data in a newer
// format version, anywhere in the journal, gives a *NewerVersionError under
// either policy and is left untouched; data in an older one is upgraded and
// rewritten in the current version before OpenJournal returns. A value that
// verifies but does not decode, or whose migration fails, is refused under
// either policy: it is a bug to fix, not damage to cut out.
func OpenJournal[V any](dir string, schema Schema, opts ...Option) (*Journal[V], error) {
	if err := schema.validate(); err != nil {
		return nil, err
	}
	if dir == "" {
		return nil, fmt.Errorf("checkpoint: OpenJournal: empty directory")
	}
	_, statErr := os.Stat(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint: OpenJournal: %w", err)
	}
	lock, err := TryLock(filepath.Join(dir, lockName))
	if err != nil {
		return nil, err
	}
	j := &Journal[V]{dir: dir, schema: schema, opts: buildOptions(opts), lock: lock, pendSeq: 1}
	if errors.Is(statErr, fs.ErrNotExist) {
		// A new directory's own entry must be durable before anything
		// acknowledged is stored in it.
		if err := syncDir(filepath.Dir(filepath.Clean(dir)), &j.fsyncs); err != nil {
			lock.Unlock()
			return nil, err
		}
	}
	j.cond.L = &j.mu
	if err := j.restore(); err != nil {
		if j.log != nil {
			j.log.Close()
		}
		lock.Unlock()
		return nil, err
	}
	return j, nil
}

func (j *Journal[V]) logPath(gen uint64) string {
	return filepath.Join(j.dir, logPrefix+strconv.FormatUint(gen, 10))
}

// listing is what restore finds in the directory.
type listing struct {
	snapshot bool
	logs     []uint64 // sorted
	temps    []string
}

func (j *Journal[V]) list() (listing, error) {
	var l listing
	entries, err := os.ReadDir(j.dir)
	if err != nil {
		return l, fmt.Errorf("checkpoint: list journal: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == snapshotName:
			l.snapshot = true
		case strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-"):
			l.temps = append(l.temps, name)
		case strings.HasPrefix(name, logPrefix):
			// Anything else that starts with "log." (moved-aside
			// files) fails to parse and is left alone.
			if gen, err := strconv.ParseUint(name[len(logPrefix):], 10, 64); err == nil && gen > 0 {
				l.logs = append(l.logs, gen)
			}
		}
	}
	slices.Sort(l.logs)
	return l, nil
}

func entrySize(key string, raw []byte) int64 { return int64(len(key) + len(raw) + 2*frameHdrLen) }

func (j *Journal[V]) openLog() error {
	path := j.logPath(j.logGen)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, fileMode)
	if err != nil {
		return fmt.Errorf("checkpoint: open log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("checkpoint: open log: %w", err)
	}
	j.log, j.logSize = f, st.Size()
	return nil
}

// logHeader is the header of log gen; prevSize, when not negative, is the
// final size of log gen-1, so that a restore can tell that log from one
// that lost records at its end (see readLog).
func (j *Journal[V]) logHeader(gen uint64, prevSize int64) []byte {
	h := header{Kind: j.schema.Kind, Version: j.schema.Version, Generation: gen}
	if prevSize >= 0 {
		h.PrevLogSize = &prevSize
	}
	return appendHeader(nil, magicLog, h)
}

// Recovery says what OpenJournal restored and what it copied aside because
// it was damaged (only under MoveCorruptAside); nil when nothing was. A
// caller that opts into MoveCorruptAside must look at it: the changes it
// lists are not in the state.
func (j *Journal[V]) Recovery() *Recovery[V] { return j.recovery }

// Dir returns the journal's directory.
func (j *Journal[V]) Dir() string { return j.dir }

// Fsyncs returns the number of fsync calls (log, snapshot, directory) this
// journal has made since it was opened.
func (j *Journal[V]) Fsyncs() uint64 { return j.fsyncs.Load() }

// Snapshot returns a new map holding the current state: everything restored
// plus everything committed since. The values are decoded once and shared
// between Snapshot calls, so treat them as read-only (Get decodes a fresh
// copy).
func (j *Journal[V]) Snapshot() map[string]V {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make(map[string]V, len(j.state))
	for k, s := range j.state {
		out[k] = s.value
	}
	return out
}

// Get returns a freshly decoded copy of the value stored under key, and
// whether there is one. The stored bytes decoded into a V when they were
// restored or committed, so an error here means V decodes differently now
// (a custom UnmarshalJSON that is not deterministic, say); it wraps the
// decoding error and names the key.
func (j *Journal[V]) Get(key string) (V, bool, error) {
	j.mu.Lock()
	s, ok := j.state[key]
	j.mu.Unlock()
	var v V
	if !ok {
		return v, false, nil
	}
	if err := jsonfast.Unmarshal(s.raw, &v); err != nil {
		return v, true, fmt.Errorf("checkpoint: journal %s: stored value of %q no longer decodes: %w", j.dir, key, err)
	}
	return v, true, nil
}

// Len returns the number of keys.
func (j *Journal[V]) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.state)
}

// Close waits for queued commits and any compaction in progress, closes the
// log and releases the lock. It returns the error of a failed background
// compaction, if one happened (the data is safe regardless: the logs it
// would have replaced are kept).
func (j *Journal[V]) Close() error {
	j.mu.Lock()
	if j.closing || j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	j.closing = true
	for j.flushing || len(j.pending) > 0 {
		if !j.flushing && j.failed == nil {
			j.flushLocked()
			continue
		}
		if j.failed != nil && !j.flushing {
			break
		}
		j.cond.Wait()
	}
	done := j.compactDone
	j.mu.Unlock()
	if done != nil {
		<-done
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closed = true
	errs := []error{j.compactErr}
	if j.log != nil {
		errs = append(errs, j.log.Close())
	}
	errs = append(errs, j.lock.Unlock())
	return errors.Join(errs...)
}
