package claimstatus

import (
	"context"
	"errors"
	"sync"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// A Queue writes device status in the background, so that a driver's
// NodePrepareResources never waits for the API server's answer to a
// status write, and so that status writes cost the API server as little
// as they can:
//
//   - per claim (and Writer) only the newest intent is kept: an Apply
//     queued after an unsent one replaces it, and [Queue.Forget] drops an
//     unsent one, so a claim prepared and unprepared before its status went
//     out costs no write at all;
//   - writes of one claim and Writer are never concurrent and keep their
//     order;
//   - writes yield to the kubelet's calls: with [QueueOptions.Calls] set,
//     a worker waits until no call has been in flight for
//     [QueueOptions.Quiet] (at most [QueueOptions.MaxYield]) before each
//     write, so the status competes neither for the node's CPU nor for the
//     API server while the kubelet works through a burst of prepares (its
//     calls come one after another, and "none in flight" alone lets a
//     write into every gap between two of them); a claim unprepared within
//     the burst costs no write at all;
//   - a write that failed for a reason that may pass (a timeout, throttling,
//     the server unreachable) is tried again with backoff, unless a newer
//     intent came meanwhile; a refusal is final.
//
// What it does not do is clear the status of a claim the kubelet
// unprepares: the kubelet unprepares a claim once no pod on the node uses
// it, the resourceclaim controller then deallocates it ("it deallocates a
// claim as soon as the last consumer stops using it"), and the API server
// (v1.37, dropDeallocatedStatusDevices) drops the status.devices entries
// of deallocated devices itself. A driver that knows a claim stays
// allocated after its unprepare calls Clear.
type Queue struct {
	opts QueueOptions

	mu       sync.Mutex
	wake     *sync.Cond
	pending  map[queueKey]*intent // the newest unsent intent per key
	order    []queueKey           // keys with a pending intent ready to go, oldest first
	queued   map[queueKey]bool    // key is in order
	inflight map[queueKey]bool    // key is being written by a worker
	retries  map[queueKey]*time.Timer
	stopping bool
	workers  sync.WaitGroup
	// yielding, in tests, is called when a worker starts waiting for the
	// calls in flight.
	yielding func()
	// after, in tests, replaces time.After for the quiet period.
	after func(time.Duration) <-chan time.Time
	// cancel ends the workers' waits and writes when Stop gives up.
	ctx    context.Context
	cancel context.CancelFunc
}

// QueueOptions configure a Queue. Every field has a default.
type QueueOptions struct {
	// Workers write concurrently (different claims only); default 1: the
	// status is informational, and one worker keeps it low priority.
	Workers int
	// MaxAttempts bounds the tries of a write that fails for a reason that
	// may pass; default 5.
	MaxAttempts int
	// Timeout bounds one write; default 10 s.
	Timeout time.Duration
	// Calls, when set, makes every write wait until no call counted by it
	// has been in flight for Quiet.
	Calls *Calls
	// Quiet is how long the calls must have been over before a write goes
	// out; default 200 ms, about the gap between two pods' prepares
	// when a node starts many. A negative value waits only for the calls
	// in flight.
	Quiet time.Duration
	// MaxYield bounds that wait, so that a node under constant load still
	// gets its status written; default 5 s.
	MaxYield time.Duration
	// Result, when set, is called after every write attempt, from the
	// worker (keep it short): for metrics and logs.
	Result func(Result)
}

// Result is the outcome of one write attempt.
type Result struct {
	Driver  string
	Claim   Claim
	Op      string // "apply" or "clear"
	Devices int
	// Err is nil for a write the API server accepted.
	Err error
	// Attempts made so far for this intent, this one included.
	Attempts int
	// Retry is true when the write failed and will be tried again.
	Retry bool
}

type queueKey struct {
	w   *Writer
	uid types.UID
}

type intent struct {
	claim    Claim
	devices  []resourcev1.AllocatedDeviceStatus
	clear    bool
	attempts int
}

// NewQueue starts a queue's workers; Stop ends them.
func NewQueue(opts QueueOptions) *Queue {
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 5
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.MaxYield <= 0 {
		opts.MaxYield = 5 * time.Second
	}
	switch {
	case opts.Quiet == 0:
		opts.Quiet = DefaultQuiet
	case opts.Quiet < 0:
		opts.Quiet = 0
	}
	q := &Queue{
		opts:     opts,
		pending:  map[queueKey]*intent{},
		queued:   map[queueKey]bool{},
		inflight: map[queueKey]bool{},
		retries:  map[queueKey]*time.Timer{},
	}
	q.wake = sync.NewCond(&q.mu)
	q.ctx, q.cancel = context.WithCancel(context.Background())
	for range opts.Workers {
		q.workers.Add(1)
		go q.work()
	}
	return q
}

// Apply queues writing devices as w's entries of the claim (Writer.Apply),
// replacing an unsent intent for the same claim and Writer.
func (q *Queue) Apply(w *Writer, claim Claim, devices []resourcev1.AllocatedDeviceStatus) {
	q.put(queueKey{w, claim.UID}, &intent{claim: claim, devices: devices})
}

// Clear queues removing w's entries of the claim (Writer.Clear), replacing
// an unsent intent for the same claim and Writer.
func (q *Queue) Clear(w *Writer, claim Claim) {
	q.put(queueKey{w, claim.UID}, &intent{claim: claim, clear: true})
}

// Forget drops the unsent intent, if any, for w's entries of the claim
// with uid, and reports whether there was one. A write in flight finishes.
func (q *Queue) Forget(w *Writer, uid types.UID) bool {
	k := queueKey{w, uid}
	q.mu.Lock()
	defer q.mu.Unlock()
	_, had := q.pending[k]
	delete(q.pending, k)
	if t := q.retries[k]; t != nil {
		t.Stop()
		delete(q.retries, k)
		had = true
	}
	return had
}

// Len is the number of claims with an unsent intent.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending) + len(q.retries)
}

func (q *Queue) put(k queueKey, in *intent) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopping {
		return
	}
	if t := q.retries[k]; t != nil {
		t.Stop()
		delete(q.retries, k)
	}
	q.pending[k] = in
	q.readyLocked(k)
}

// readyLocked puts k in line unless it already is or a worker has it
// (that worker puts it back when it is done).
func (q *Queue) readyLocked(k queueKey) {
	if q.queued[k] || q.inflight[k] {
		return
	}
	q.queued[k] = true
	q.order = append(q.order, k)
	q.wake.Signal()
}

// next waits for a key with a pending intent and takes it.
func (q *Queue) next() (queueKey, *intent, bool) {
	for {
		q.mu.Lock()
		for len(q.order) == 0 && !q.stopping {
			q.wake.Wait()
		}
		if len(q.order) == 0 {
			q.mu.Unlock()
			return queueKey{}, nil, false
		}
		stopping := q.stopping
		q.mu.Unlock()
		// Yield before taking the intent, so that an Unprepare meanwhile
		// can still forget it. A stopping queue drains without yielding.
		if !stopping {
			q.yield()
		}
		if k, in, ok := q.take(); ok {
			return k, in, true
		}
	}
}

// yield waits, at most MaxYield, until the calls have been quiet.
func (q *Queue) yield() {
	c := q.opts.Calls
	if c == nil {
		return
	}
	if q.yielding != nil && c.busy() {
		q.yielding()
	}
	ctx, cancel := context.WithTimeout(q.ctx, q.opts.MaxYield)
	defer cancel()
	_ = c.waitQuiet(ctx, q.opts.Quiet, q.after)
}

// take takes the oldest pending intent, if any is left.
func (q *Queue) take() (queueKey, *intent, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) > 0 {
		k := q.order[0]
		q.order = q.order[1:]
		delete(q.queued, k)
		in := q.pending[k]
		if in == nil {
			continue // forgotten
		}
		delete(q.pending, k)
		q.inflight[k] = true
		return k, in, true
	}
	return queueKey{}, nil, false
}

func (q *Queue) work() {
	defer q.workers.Done()
	for {
		k, in, ok := q.next()
		if !ok {
			return
		}
		q.write(k, in)
	}
}

func (q *Queue) write(k queueKey, in *intent) {
	ctx, cancel := context.WithTimeout(q.ctx, q.opts.Timeout)
	var err error
	op := "apply"
	if in.clear {
		op = "clear"
		err = k.w.Clear(ctx, in.claim)
	} else {
		err = k.w.Apply(ctx, in.claim, in.devices)
	}
	cancel()
	in.attempts++
	retry := err != nil && Retryable(err) && in.attempts < q.opts.MaxAttempts

	q.mu.Lock()
	delete(q.inflight, k)
	_, newer := q.pending[k]
	retry = retry && !newer && !q.stopping
	if retry {
		// Exponential backoff from 100 ms, at most 5 s.
		wait := min(100*time.Millisecond<<(in.attempts-1), 5*time.Second)
		var t *time.Timer
		t = time.AfterFunc(wait, func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			if q.retries[k] != t {
				return // forgotten or replaced meanwhile
			}
			delete(q.retries, k)
			q.pending[k] = in
			q.readyLocked(k)
		})
		q.retries[k] = t
	}
	if newer {
		q.readyLocked(k)
	}
	q.mu.Unlock()

	if q.opts.Result != nil {
		q.opts.Result(Result{Driver: k.w.driver, Claim: in.claim, Op: op, Devices: len(in.devices), Err: err, Attempts: in.attempts, Retry: retry})
	}
}

// Stop stops accepting intents, lets the workers write what is queued until
// ctx ends, then drops the rest and waits for the workers. It returns the
// number of intents dropped.
func (q *Queue) Stop(ctx context.Context) int {
	q.mu.Lock()
	q.stopping = true
	for k, t := range q.retries {
		t.Stop()
		delete(q.retries, k)
	}
	q.wake.Broadcast()
	q.mu.Unlock()
	done := make(chan struct{})
	go func() {
		q.workers.Wait()
		close(done)
	}()
	dropped := 0
	select {
	case <-done:
	case <-ctx.Done():
		q.mu.Lock()
		dropped = len(q.pending)
		q.pending = map[queueKey]*intent{}
		q.mu.Unlock()
		q.cancel()
		<-done
	}
	q.cancel()
	return dropped
}

// Retryable reports whether a write that failed with err may succeed when
// tried again: not for refusals (Forbidden, Invalid, NotFound, a replaced
// claim, input the writer refused).
func Retryable(err error) bool {
	if err == nil || errors.Is(err, ErrInvalid) || errors.Is(err, ErrClaimReplaced) {
		return false
	}
	switch {
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsNotFound(err), apierrors.IsUnauthorized(err),
		apierrors.IsBadRequest(err), apierrors.IsMethodNotSupported(err), apierrors.IsConflict(err):
		return false
	}
	return true
}

// Calls counts calls in flight (a driver's NodePrepareResources and
// NodeUnprepareResources) so that a Queue's writes wait for them. The zero
// value is ready to use.
type Calls struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n == 0; nil means closed
	// ended is when n last fell to 0, ends how often it did.
	ended time.Time
	ends  uint64
}

// DefaultQuiet is QueueOptions.Quiet's default.
const DefaultQuiet = 200 * time.Millisecond

// Begin counts a call in flight until the matching End.
func (c *Calls) Begin() {
	c.mu.Lock()
	if c.n == 0 {
		c.idle = make(chan struct{})
	}
	c.n++
	c.mu.Unlock()
}

// End ends a call Begin counted.
func (c *Calls) End() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
	if c.n == 0 {
		c.ended = time.Now()
		c.ends++
		close(c.idle)
	}
}

func (c *Calls) busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n > 0
}

// WaitIdle waits until no call is in flight, or ctx ends (its error).
func (c *Calls) WaitIdle(ctx context.Context) error {
	c.mu.Lock()
	idle := c.idle
	busy := c.n > 0
	c.mu.Unlock()
	if !busy {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitQuiet waits until no call has been in flight for quiet, or ctx ends
// (its error). after is time.After unless a test replaces it.
func (c *Calls) waitQuiet(ctx context.Context, quiet time.Duration, after func(time.Duration) <-chan time.Time) error {
	if after == nil {
		after = time.After
	}
	for {
		if err := c.WaitIdle(ctx); err != nil {
			return err
		}
		c.mu.Lock()
		busy, ends, left := c.n > 0, c.ends, quiet-time.Since(c.ended)
		c.mu.Unlock()
		if busy {
			continue // a call began since WaitIdle returned
		}
		if ends == 0 || left <= 0 {
			return nil
		}
		select {
		case <-after(left):
		case <-ctx.Done():
			return ctx.Err()
		}
		c.mu.Lock()
		settled := c.n == 0 && c.ends == ends
		c.mu.Unlock()
		if settled {
			return nil
		}
		// Calls came (and perhaps went) meanwhile: wait again.
	}
}
