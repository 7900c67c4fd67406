package checkpoint

import (
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/dranode/dranode/checkpoint/internal/jsonfast"
)

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
	if j.beforeFlush != nil {
		j.beforeFlush()
	}
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
