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
