package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dranode/dranode/checkpoint/internal/jsonfast"
)

// stored is a value as found on disk, before decoding.
type stored struct {
	raw     []byte
	version int
	path    string
	off     int64
}

// replay accumulates restored records: the stored bytes of each key's last
// value, the encoded size of the state and which keys logs touched.
type replay struct {
	found   map[string]stored
	live    int64
	records int
	touched map[string]bool // keys a replayed log record changed
}

func (r *replay) apply(payload []byte, version int, path string, off int64, fromLog bool) {
	r.records++
	_ = parseRecord(payload, func(key, value []byte, del bool) {
		k := string(key)
		if fromLog {
			r.touched[k] = true
		}
		if old, ok := r.found[k]; ok {
			r.live -= entrySize(k, old.raw)
		}
		if del {
			delete(r.found, k)
			return
		}
		r.found[k] = stored{raw: value, version: version, path: path, off: off}
		r.live += entrySize(k, value)
	})
}

// versionAt is the version of a file's records when its header was read
// (the trusted part ends after it), else -1.
func versionAt(h header, stop int) int {
	if stop == 0 {
		return -1
	}
	return h.Version
}

// restore reads everything, and only once all of it verified changes the
// directory (removing debris, cutting a torn tail) and opens the log. Under
// MoveCorruptAside, damage ends what is trusted instead of the restore: the
// remainder is copied aside and a snapshot of what was restored replaces
// the damaged files (see Recovery).
func (j *Journal[V]) restore() error {
	l, err := j.list()
	if err != nil {
		return err
	}
	recovering := j.opts.corrupt == MoveCorruptAside
	var rec recovery
	// damaged ends the restore with err, or, when recovering from
	// corruption, notes it and what is no longer trusted.
	damaged := func(err error, rest ...remainder) error {
		var ce *CorruptError
		if !recovering || !errors.As(err, &ce) {
			return err
		}
		rec.found(ce)
		rec.rest = append(rec.rest, rest...)
		return nil
	}
	rp := &replay{found: make(map[string]stored), touched: make(map[string]bool)}
	upgradeNeeded := false

	snapGen, genKnown := uint64(1), true
	if l.snapshot {
		path := filepath.Join(j.dir, snapshotName)
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("checkpoint: read snapshot: %w", err)
		}
		h, stop, err := j.readSnapshot(path, data, rp)
		if err != nil {
			records := -1
			if stop > 0 {
				records = *h.Records - rp.records
			}
			if err := damaged(err, remainder{path: path, magic: magicSnapshot, data: data, off: stop, version: versionAt(h, stop), beforeLogs: true, records: records}); err != nil {
				return err
			}
			genKnown = stop > 0
		}
		if genKnown {
			snapGen = h.Generation
			upgradeNeeded = upgradeNeeded || h.Version < j.schema.Version
		}
	}
	var stale, logs, older, afterGap []uint64
	if genKnown {
		for _, g := range l.logs {
			if g < snapGen {
				stale = append(stale, g) // folded into the snapshot; removal was cut short
			} else {
				logs = append(logs, g)
			}
		}
	} else if n := len(l.logs); n > 0 {
		// Without the snapshot's generation, the live logs are the run
		// that ends at the newest one.
		i := n - 1
		for i > 0 && l.logs[i-1] == l.logs[i]-1 {
			i--
		}
		older, logs = l.logs[:i], l.logs[i:]
		snapGen = logs[0]
	}
	for _, g := range older {
		rem, err := j.readWholeLog(g, true)
		if err != nil {
			return err
		}
		rec.rest = append(rec.rest, rem)
	}
	for i, g := range logs {
		if want := snapGen + uint64(i); g != want {
			missing := j.logPath(want)
			if err := damaged(&CorruptError{Path: missing, Reason: fmt.Sprintf("log generation %d is missing but later generation %d exists", want, g)}); err != nil {
				return err
			}
			for m := want; m < g; m++ {
				rec.lost = append(rec.lost, j.logPath(m)+": missing")
			}
			logs, afterGap = logs[:i], logs[i:]
			break
		}
	}
	var torn struct {
		path string
		off  int64
	}
	datas := make([][]byte, len(logs))
	for i, g := range logs {
		if datas[i], err = os.ReadFile(j.logPath(g)); err != nil {
			return fmt.Errorf("checkpoint: read log: %w", err)
		}
	}
	logDamaged := false
	for i, g := range logs {
		path, data := j.logPath(g), datas[i]
		if logDamaged {
			rem, err := j.wholeLog(g, data, false)
			if err != nil {
				return err
			}
			rec.rest = append(rec.rest, rem)
			continue
		}
		last := i == len(logs)-1 && len(afterGap) == 0
		size := int64(-1)
		if i+1 < len(logs) {
			if next, _, err := readHeader(j.logPath(logs[i+1]), datas[i+1], magicLog, j.schema); err == nil && next.PrevLogSize != nil {
				size = *next.PrevLogSize
			}
		}
		h, cut, stop, err := j.readLog(path, g, data, last, size, rp)
		if err != nil {
			if err := damaged(err, remainder{path: path, magic: magicLog, data: data, off: stop, version: versionAt(h, stop), records: -1}); err != nil {
				return err
			}
			if size > int64(len(data)) {
				rec.lost = append(rec.lost, fmt.Sprintf("%s: %d bytes missing from its end (the next log's header says it ended at byte %d)", path, size-int64(len(data)), size))
			}
			logDamaged = true
			continue
		}
		upgradeNeeded = upgradeNeeded || h.Version < j.schema.Version
		if cut >= 0 {
			torn.path, torn.off = path, cut
		}
	}
	for _, g := range afterGap {
		rem, err := j.readWholeLog(g, false)
		if err != nil {
			return err
		}
		rec.rest = append(rec.rest, rem)
	}

	state, err := j.decodeAll(rp.found)
	if err != nil {
		return err
	}
	if rec.damage != nil {
		j.recovery = j.report(&rec, rp.records, rp.touched)
		if err := j.copyAside(j.recovery, rec.rest, time.Now()); err != nil {
			return err
		}
	}

	// Everything verified, or what did not is copied aside: now the
	// directory may change.
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

	j.state, j.live = state, rp.live
	// Append to the newest log on disk; after damage it is only rotated
	// away from, so that the new snapshot supersedes every damaged file.
	newest := uint64(0)
	if n := len(l.logs); n > 0 && l.logs[n-1] >= snapGen {
		newest = l.logs[n-1]
	}
	if newest == 0 {
		if err := writeFile(j.logPath(snapGen), j.logHeader(snapGen, -1), &j.fsyncs); err != nil {
			return err
		}
		newest = snapGen
	}
	j.logGen = newest
	if err := j.openLog(); err != nil {
		return err
	}
	if upgradeNeeded || rec.damage != nil {
		// Rewrite now: no file of an older version stays behind next to
		// new records, and no damaged file next to a journal in use.
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

// wholeLog reads log gen as untrusted remainder. A log of a newer format
// version is refused even there: it is never moved or replaced.
func (j *Journal[V]) readWholeLog(gen uint64, beforeLogs bool) (remainder, error) {
	data, err := os.ReadFile(j.logPath(gen))
	if err != nil {
		return remainder{}, fmt.Errorf("checkpoint: read log: %w", err)
	}
	return j.wholeLog(gen, data, beforeLogs)
}

func (j *Journal[V]) wholeLog(gen uint64, data []byte, beforeLogs bool) (remainder, error) {
	path := j.logPath(gen)
	if _, _, err := readHeader(path, data, magicLog, j.schema); errors.Is(err, ErrNewerVersion) {
		return remainder{}, err
	}
	return remainder{path: path, magic: magicLog, data: data, version: -1, beforeLogs: beforeLogs, records: -1}, nil
}

// readSnapshot replays the snapshot's records into rp. On damage, stop is
// where the trusted bytes end: 0 when the header (or its generation) is
// unusable, else the offset of the first record that is not restored.
func (j *Journal[V]) readSnapshot(path string, data []byte, rp *replay) (h header, stop int, err error) {
	h, off, err := readHeader(path, data, magicSnapshot, j.schema)
	if err != nil {
		return h, 0, err
	}
	if h.Generation < 1 || h.Records == nil || *h.Records < 0 {
		return h, 0, &CorruptError{Path: path, Offset: magicLen, Reason: "snapshot header lacks a generation or a record count"}
	}
	for i := 0; i < *h.Records; i++ {
		payload, next, fault := readFrame(data, off)
		if fault != faultNone {
			return h, off, &CorruptError{Path: path, Offset: int64(off), Reason: fmt.Sprintf("record %d of %d: %s", i+1, *h.Records, fault)}
		}
		var bad string
		err := parseRecord(payload, func(key, value []byte, del bool) {
			if del {
				bad = "snapshot holds a delete"
			}
		})
		if err == nil && bad != "" {
			err = errors.New(bad)
		}
		if err != nil {
			return h, off, &CorruptError{Path: path, Offset: int64(off), Reason: fmt.Sprintf("record %d of %d", i+1, *h.Records), Err: err}
		}
		rp.apply(payload, h.Version, path, int64(off), false)
		off = next
	}
	if off != len(data) {
		return h, off, &CorruptError{Path: path, Offset: int64(off), Reason: fmt.Sprintf("%d unexpected bytes after the last record", len(data)-off)}
	}
	return h, off, nil
}

// readLog replays one log into rp. For the last log, a damaged tail with no
// valid frame after it is a torn append: cut is where to truncate (else
// -1). size, when not negative, is the log's final size as the next log's
// header records it: a log that ends early lost records even if it ends on
// a record boundary, and bytes past it were never part of it. On damage,
// stop is where the trusted bytes end (0: the header).
func (j *Journal[V]) readLog(path string, gen uint64, data []byte, last bool, size int64, rp *replay) (h header, cut int64, stop int, err error) {
	h, off, err := readHeader(path, data, magicLog, j.schema)
	if err != nil {
		return h, -1, 0, err
	}
	if h.Generation != gen {
		return h, -1, 0, &CorruptError{Path: path, Offset: magicLen, Reason: fmt.Sprintf("header says generation %d, file name says %d", h.Generation, gen)}
	}
	if size >= 0 {
		if size < int64(off) {
			return h, -1, 0, &CorruptError{Path: path, Reason: fmt.Sprintf("the next log's header says this log ended at byte %d, inside its header", size)}
		}
		whole := len(data)
		data = data[:min(int64(whole), size)]
		defer func() {
			if err == nil && int64(whole) != size {
				stop, err = len(data), &CorruptError{Path: path, Offset: int64(len(data)), Reason: fmt.Sprintf("log is %d bytes but the next log's header says it ended at byte %d", whole, size)}
			}
		}()
	}
	for off < len(data) {
		payload, next, fault := readFrame(data, off)
		if fault != faultNone {
			if last && !validFrameAfter(data, off) {
				return h, int64(off), off, nil
			}
			where := "before the last log"
			if last {
				where = "followed by valid records"
			}
			return h, -1, off, &CorruptError{Path: path, Offset: int64(off), Reason: fmt.Sprintf("damaged record %s: %s", where, fault)}
		}
		// Check the whole record before applying any of it.
		if err := parseRecord(payload, func([]byte, []byte, bool) {}); err != nil {
			return h, -1, off, &CorruptError{Path: path, Offset: int64(off), Reason: "record does not parse", Err: err}
		}
		rp.apply(payload, h.Version, path, int64(off), true)
		off = next
	}
	return h, -1, off, nil
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
