package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	lock   *os.File
	fsyncs atomic.Uint64

	mu    sync.Mutex
	cond  sync.Cond
	state map[string]slot[V]
	live  int64 // encoded size of the state: what a snapshot would take

	log     *os.File
	logGen  uint64
	logSize int64

	enqueued atomic.Uint64 // commits queued since open, read without mu by a leader
	pending  []byte        // frames of the batch that is filling up
	spare    []byte        // the buffer of the last batch, for reuse
	pendOps  []encoded[V]  // its changes, applied once durable
	pendSeq  uint64        // number of the batch that is filling up
	doneSeq  uint64        // every batch up to this one is durable
	flushing bool          // a leader is writing a batch
	failed   error         // a write or fsync failed; the journal is unusable
	closing  bool
	closed   bool

	compacting  bool
	compactDone chan struct{}
	compactErr  error

	movedAside []string
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
// anywhere else is a *CorruptError (or, under MoveCorruptAside, the files
// are renamed to <name>.corrupt-<timestamp>, see MovedAside, and the journal
// starts empty). Data in a newer format version gives a *NewerVersionError
// and is left untouched; data in an older one is upgraded and rewritten in
// the current version before OpenJournal returns.
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
	lock, err := lockFile(filepath.Join(dir, lockName))
	if err != nil {
		return nil, err
	}
	j := &Journal[V]{dir: dir, schema: schema, opts: buildOptions(opts), lock: lock, pendSeq: 1}
	if errors.Is(statErr, fs.ErrNotExist) {
		// A new directory's own entry must be durable before anything
		// acknowledged is stored in it.
		if err := syncDir(filepath.Dir(filepath.Clean(dir)), &j.fsyncs); err != nil {
			unlockFile(lock)
			return nil, err
		}
	}
	j.cond.L = &j.mu
	err = j.restore()
	var corrupt *CorruptError
	if err != nil && j.opts.corrupt == MoveCorruptAside && errors.As(err, &corrupt) {
		err = j.moveAllAside()
		if err == nil {
			err = j.restore()
		}
	}
	if err != nil {
		if j.log != nil {
			j.log.Close()
		}
		unlockFile(lock)
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

// stored is a value as found on disk, before decoding.
type stored struct {
	raw     []byte
	version int
	path    string
	off     int64
}

// restore reads everything, and only once all of it verified, changes the
// directory (removing debris, cutting a torn tail) and opens the log.
func (j *Journal[V]) restore() error {
	l, err := j.list()
	if err != nil {
		return err
	}
	found := make(map[string]stored)
	live := int64(0)
	apply := func(key, value []byte, del bool, version int, path string, off int64) {
		k := string(key)
		if old, ok := found[k]; ok {
			live -= entrySize(k, old.raw)
		}
		if del {
			delete(found, k)
			return
		}
		found[k] = stored{raw: value, version: version, path: path, off: off}
		live += entrySize(k, value)
	}
	upgradeNeeded := false

	snapGen := uint64(1)
	if l.snapshot {
		h, err := j.readSnapshot(apply)
		if err != nil {
			return err
		}
		snapGen = h.Generation
		upgradeNeeded = upgradeNeeded || h.Version < j.schema.Version
	}
	var stale, logs []uint64
	for _, g := range l.logs {
		if g < snapGen {
			stale = append(stale, g) // folded into the snapshot; removal was cut short
		} else {
			logs = append(logs, g)
		}
	}
	for i, g := range logs {
		if g != snapGen+uint64(i) {
			return &CorruptError{Path: j.logPath(snapGen + uint64(i)), Reason: fmt.Sprintf("log generation %d is missing but later generation %d exists", snapGen+uint64(i), g)}
		}
	}
	var torn struct {
		path string
		off  int64
	}
	for i, g := range logs {
		h, cut, err := j.readLog(g, i == len(logs)-1, apply)
		if err != nil {
			return err
		}
		upgradeNeeded = upgradeNeeded || h.Version < j.schema.Version
		if cut >= 0 {
			torn.path, torn.off = j.logPath(g), cut
		}
	}

	state, err := j.decodeAll(found)
	if err != nil {
		return err
	}

	// Everything verified: now the directory may change.
	for _, t := range l.temps {
		if err := os.Remove(filepath.Join(j.dir, t)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("checkpoint: remove stale temporary file: %w", err)
		}
	}
	for _, g := range stale {
		if err := os.Remove(j.logPath(g)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("checkpoint: remove superseded log: %w", err)
		}
	}
	if torn.path != "" {
		if err := truncateDurably(torn.path, torn.off, &j.fsyncs); err != nil {
			return err
		}
	}
	if len(l.temps) > 0 || len(stale) > 0 {
		if err := syncDir(j.dir, &j.fsyncs); err != nil {
			return err
		}
	}

	j.state, j.live = state, live
	if len(logs) == 0 {
		if err := writeFile(j.logPath(snapGen), j.logHeader(snapGen), &j.fsyncs); err != nil {
			return err
		}
		logs = append(logs, snapGen)
	}
	j.logGen = logs[len(logs)-1]
	if err := j.openLog(); err != nil {
		return err
	}
	if upgradeNeeded {
		// Rewrite in the current version now, so no file of an older
		// version stays behind next to new records.
		j.mu.Lock()
		gen, entries, err := j.rotateLocked()
		j.mu.Unlock()
		if err != nil {
			return err
		}
		return j.writeSnapshot(gen, entries)
	}
	return nil
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

func (j *Journal[V]) logHeader(gen uint64) []byte {
	return appendHeader(nil, magicLog, header{Kind: j.schema.Kind, Version: j.schema.Version, Generation: gen})
}

type applyFunc func(key, value []byte, del bool, version int, path string, off int64)

func (j *Journal[V]) readSnapshot(apply applyFunc) (header, error) {
	path := filepath.Join(j.dir, snapshotName)
	data, err := os.ReadFile(path)
	if err != nil {
		return header{}, fmt.Errorf("checkpoint: read snapshot: %w", err)
	}
	h, off, err := readHeader(path, data, magicSnapshot, j.schema)
	if err != nil {
		return h, err
	}
	if h.Generation < 1 || h.Records == nil || *h.Records < 0 {
		return h, &CorruptError{Path: path, Offset: magicLen, Reason: "snapshot header lacks a generation or a record count"}
	}
	for i := 0; i < *h.Records; i++ {
		payload, next, fault := readFrame(data, off)
		if fault != faultNone {
			return h, &CorruptError{Path: path, Offset: int64(off), Reason: fmt.Sprintf("record %d of %d: %s", i+1, *h.Records, fault)}
		}
		var bad string
		err := parseRecord(payload, func(key, value []byte, del bool) {
			if del {
				bad = "snapshot holds a delete"
				return
			}
			apply(key, value, false, h.Version, path, int64(off))
		})
		if err == nil && bad != "" {
			err = errors.New(bad)
		}
		if err != nil {
			return h, &CorruptError{Path: path, Offset: int64(off), Reason: fmt.Sprintf("record %d of %d", i+1, *h.Records), Err: err}
		}
		off = next
	}
	if off != len(data) {
		return h, &CorruptError{Path: path, Offset: int64(off), Reason: fmt.Sprintf("%d unexpected bytes after the last record", len(data)-off)}
	}
	return h, nil
}

// readLog replays one log. For the last log, a damaged tail with no valid
// frame after it is a torn append: cut is where to truncate (else -1).
func (j *Journal[V]) readLog(gen uint64, last bool, apply applyFunc) (h header, cut int64, err error) {
	path := j.logPath(gen)
	data, err := os.ReadFile(path)
	if err != nil {
		return h, -1, fmt.Errorf("checkpoint: read log: %w", err)
	}
	h, off, err := readHeader(path, data, magicLog, j.schema)
	if err != nil {
		return h, -1, err
	}
	if h.Generation != gen {
		return h, -1, &CorruptError{Path: path, Offset: magicLen, Reason: fmt.Sprintf("header says generation %d, file name says %d", h.Generation, gen)}
	}
	for off < len(data) {
		payload, next, fault := readFrame(data, off)
		if fault != faultNone {
			if last && !validFrameAfter(data, off) {
				return h, int64(off), nil
			}
			where := "before the last log"
			if last {
				where = "followed by valid records"
			}
			return h, -1, &CorruptError{Path: path, Offset: int64(off), Reason: fmt.Sprintf("damaged record %s: %s", where, fault)}
		}
		// Check the whole record before applying any of it.
		if err := parseRecord(payload, func([]byte, []byte, bool) {}); err != nil {
			return h, -1, &CorruptError{Path: path, Offset: int64(off), Reason: "record does not parse", Err: err}
		}
		_ = parseRecord(payload, func(key, value []byte, del bool) {
			apply(key, value, del, h.Version, path, int64(off))
		})
		off = next
	}
	return h, -1, nil
}

// decodeAll upgrades and decodes the final value of every key, once, in
// parallel when there are many.
func (j *Journal[V]) decodeAll(found map[string]stored) (map[string]slot[V], error) {
	type item struct {
		key string
		s   stored
	}
	items := make([]item, 0, len(found))
	for k, s := range found {
		items = append(items, item{k, s})
	}
	slots := make([]slot[V], len(items))
	errs := make([]error, len(items))
	decode := func(lo, hi int) {
		var dec jsonfast.Decoder
		for i := lo; i < hi; i++ {
			it := items[i]
			raw := []byte(it.s.raw)
			if it.s.version < j.schema.Version {
				up, err := j.schema.upgrade(it.s.path, it.s.version, raw)
				if err != nil {
					errs[i] = err
					continue
				}
				raw = up
			}
			if err := dec.Unmarshal(raw, &slots[i].value); err != nil {
				errs[i] = &CorruptError{Path: it.s.path, Offset: it.s.off, Reason: fmt.Sprintf("value of key %q does not decode", it.key), Err: err}
				continue
			}
			slots[i].raw = raw
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(items)/1024+1)
	if workers <= 1 {
		decode(0, len(items))
	} else {
		var wg sync.WaitGroup
		chunk := (len(items) + workers - 1) / workers
		for lo := 0; lo < len(items); lo += chunk {
			wg.Go(func() { decode(lo, min(lo+chunk, len(items))) })
		}
		wg.Wait()
	}
	state := make(map[string]slot[V], len(items))
	for i, it := range items {
		if errs[i] != nil {
			return nil, errs[i]
		}
		state[it.key] = slots[i]
	}
	return state, nil
}

func truncateDurably(path string, size int64, fsyncs *atomic.Uint64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, fileMode)
	if err != nil {
		return fmt.Errorf("checkpoint: cut torn log tail: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("checkpoint: cut torn log tail: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("checkpoint: cut torn log tail: %w", err)
	}
	fsyncs.Add(1)
	return nil
}

// moveAllAside renames the snapshot and every log to <name>.corrupt-<ts>.
func (j *Journal[V]) moveAllAside() error {
	l, err := j.list()
	if err != nil {
		return err
	}
	now := time.Now()
	var names []string
	if l.snapshot {
		names = append(names, filepath.Join(j.dir, snapshotName))
	}
	for _, g := range l.logs {
		names = append(names, j.logPath(g))
	}
	for _, p := range names {
		aside := asideName(p, now)
		if err := os.Rename(p, aside); err != nil {
			return fmt.Errorf("checkpoint: move corrupt journal file aside: %w", err)
		}
		j.movedAside = append(j.movedAside, aside)
	}
	return syncDir(j.dir, &j.fsyncs)
}

// MovedAside lists the files OpenJournal renamed because they were corrupt
// (only under MoveCorruptAside; empty when nothing was).
func (j *Journal[V]) MovedAside() []string { return slices.Clone(j.movedAside) }

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

// Put stores value under key; durable when it returns nil.
func (j *Journal[V]) Put(key string, value V) error {
	return j.Commit(Change[V]{Key: key, Value: value})
}

// Delete removes key; durable when it returns nil. Deleting a missing key
// succeeds (and still writes a record, so that the order of concurrent
// Puts and Deletes is the order on disk).
func (j *Journal[V]) Delete(key string) error {
	return j.Commit(Change[V]{Key: key, Delete: true})
}

// Commit applies changes atomically, in order: after a crash either all of
// them or none are restored. It returns once they are durable. Concurrent
// callers share fsyncs: whoever finds no write in progress becomes the
// leader and writes every batch queued so far with one write and one fsync;
// the others wait for the fsync that covers their own record.
func (j *Journal[V]) Commit(changes ...Change[V]) error {
	if len(changes) == 0 {
		return nil
	}
	ops := make([]encoded[V], len(changes))
	frame, start := beginFrame(make([]byte, 0, 256))
	for i, c := range changes {
		if c.Key == "" {
			return fmt.Errorf("%w: change %d has an empty key", ErrInvalidKey, i)
		}
		ops[i] = encoded[V]{key: c.Key, del: c.Delete}
		if c.Delete {
			frame = appendDelete(frame, c.Key)
			continue
		}
		raw, err := json.Marshal(c.Value)
		if err != nil {
			return fmt.Errorf("checkpoint: commit %q: encode value: %w", c.Key, err)
		}
		// Decode our own copy so that the caller's later changes to
		// slices or maps inside c.Value never reach the stored state.
		if err := jsonfast.Unmarshal(raw, &ops[i].value); err != nil {
			return fmt.Errorf("checkpoint: commit %q: value does not decode back: %w", c.Key, err)
		}
		ops[i].raw = raw
		frame = appendPut(frame, c.Key, raw)
	}
	frame = finishFrame(frame, start)

	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closing || j.closed {
		return ErrClosed
	}
	if j.failed != nil {
		return j.failed
	}
	seq := j.pendSeq
	j.pending = append(j.pending, frame...)
	j.pendOps = append(j.pendOps, ops...)
	j.enqueued.Add(1)
	for j.doneSeq < seq {
		if j.failed != nil {
			return j.failed
		}
		if !j.flushing {
			j.flushLocked()
			continue
		}
		j.cond.Wait()
	}
	return nil
}

// flushLocked writes and fsyncs the filling batch. Called with j.mu held and
// no flush in progress; releases j.mu during the I/O.
func (j *Journal[V]) flushLocked() {
	j.flushing = true
	// Let goroutines that are runnable right now enqueue their records
	// first: one fsync then covers them too. Keep yielding while records
	// keep arriving (a few rounds at most); a lone committer pays one
	// Gosched.
	j.mu.Unlock()
	seen := j.enqueued.Load()
	for range 8 {
		runtime.Gosched()
		now := j.enqueued.Load()
		if now == seen {
			break
		}
		seen = now
	}
	j.mu.Lock()
	buf, ops, seq, f := j.pending, j.pendOps, j.pendSeq, j.log
	j.pending, j.pendOps = j.spare[:0], nil
	j.pendSeq++
	j.mu.Unlock()

	_, err := f.Write(buf)
	if err == nil {
		err = f.Sync()
		j.fsyncs.Add(1)
	}

	j.mu.Lock()
	j.spare = buf
	if err != nil {
		// After a failed write or fsync the log's contents are unknown;
		// only a reopen, which verifies the log, may continue.
		j.failed = fmt.Errorf("checkpoint: journal %s: append failed, reopen to recover: %w", j.dir, err)
	} else {
		for _, op := range ops {
			if old, ok := j.state[op.key]; ok {
				j.live -= entrySize(op.key, old.raw)
			}
			if op.del {
				delete(j.state, op.key)
				continue
			}
			j.state[op.key] = slot[V]{raw: op.raw, value: op.value}
			j.live += entrySize(op.key, op.raw)
		}
		j.logSize += int64(len(buf))
		j.doneSeq = seq
		j.maybeCompactLocked()
	}
	j.flushing = false
	j.cond.Broadcast()
}

type entry struct {
	key string
	raw []byte
}

// maybeCompactLocked starts a compaction when the log has outgrown the state.
func (j *Journal[V]) maybeCompactLocked() {
	if j.compacting || j.logSize <= max(j.opts.compactMinBytes, j.opts.compactRatio*j.live) {
		return
	}
	gen, entries, err := j.rotateLocked()
	if err != nil {
		// Not fatal: the old log is still in use and complete.
		j.compactErr = err
		return
	}
	j.compacting = true
	done := make(chan struct{})
	j.compactDone = done
	go func() {
		defer close(done)
		err := j.writeSnapshot(gen, entries)
		j.mu.Lock()
		j.compacting = false
		if err != nil {
			j.compactErr = err
		}
		j.mu.Unlock()
	}()
}

// rotateLocked starts log generation logGen+1 and returns the state as of
// the end of the previous log, which the snapshot of that generation must
// hold. Crash safety: until the snapshot is renamed into place, the old
// snapshot and every log from its generation on are replayed, which gives
// the same state.
func (j *Journal[V]) rotateLocked() (uint64, []entry, error) {
	gen := j.logGen + 1
	if err := writeFile(j.logPath(gen), j.logHeader(gen), &j.fsyncs); err != nil {
		return 0, nil, err
	}
	old := j.log
	j.logGen = gen
	if err := j.openLog(); err != nil {
		// Keep appending to the old log; an empty newer log behind it
		// would make its torn tail look like damage mid-journal.
		os.Remove(j.logPath(gen))
		j.logGen = gen - 1
		j.log = old
		return 0, nil, err
	}
	old.Close()
	entries := make([]entry, 0, len(j.state))
	for k, s := range j.state {
		entries = append(entries, entry{k, s.raw})
	}
	return gen, entries, nil
}

// writeSnapshot writes the snapshot of generation gen durably, then removes
// the logs it supersedes.
func (j *Journal[V]) writeSnapshot(gen uint64, entries []entry) error {
	size := 256
	for _, e := range entries {
		size += int(entrySize(e.key, e.raw)) + 2*binaryUvarintLen
	}
	n := len(entries)
	buf := appendHeader(make([]byte, 0, size), magicSnapshot, header{Kind: j.schema.Kind, Version: j.schema.Version, Generation: gen, Records: &n})
	for _, e := range entries {
		var start int
		buf, start = beginFrame(buf)
		buf = appendPut(buf, e.key, e.raw)
		buf = finishFrame(buf, start)
	}
	if err := writeFile(filepath.Join(j.dir, snapshotName), buf, &j.fsyncs); err != nil {
		return err
	}
	l, err := j.list()
	if err != nil {
		return err
	}
	removed := false
	for _, g := range l.logs {
		if g < gen {
			if err := os.Remove(j.logPath(g)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("checkpoint: remove superseded log: %w", err)
			}
			removed = true
		}
	}
	if removed {
		return syncDir(j.dir, &j.fsyncs)
	}
	return nil
}

const binaryUvarintLen = 10

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
	errs = append(errs, unlockFile(j.lock))
	return errors.Join(errs...)
}
