package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// entry is one key's stored value as compaction copies it into a snapshot.
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
	if err := writeFile(j.logPath(gen), j.logHeader(gen, j.logSize), &j.fsyncs); err != nil {
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

// binaryUvarintLen is the most bytes one uvarint length prefix takes
// (binary.MaxVarintLen64).
const binaryUvarintLen = 10
