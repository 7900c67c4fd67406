package sliceclient

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// ReconnectSpread is the longest a slice list or watch waits, after one
// that failed or a watch the server ended early, before it asks the API
// server again.
//
// When the API server restarts, it ends every node's watch at the same
// instant, and client-go's reflector asks again at once (an ended watch is
// no error to it) and then after the same short back-off on each node: a
// fleet came back within one second (compat/fleet). A wait drawn uniformly
// from [0, ReconnectSpread) on each node spreads them over this window
// instead. A watch that lasted its timeout (the reflector asks for 5 to 10
// minutes) is renewed at once, and nothing waits while the server answers.
const ReconnectSpread = 5 * time.Second

// reconnects spreads the calls that follow a failed list or watch, or a
// watch that ended early.
type reconnects struct {
	mu   sync.Mutex
	lost bool // the last call failed
	// The watch open now, if any: when it started and the timeout it
	// asked for.
	watchStart   time.Time
	watchTimeout time.Duration

	// Tests replace these: wait sleeps for d or until ctx ends, draw picks
	// the wait, now tells the time, deadline runs f after d unless stopped.
	wait     func(ctx context.Context, d time.Duration) error
	draw     func(max time.Duration) time.Duration
	now      func() time.Time
	deadline func(d time.Duration, f func()) (stop func())
}

func newReconnects() *reconnects {
	return &reconnects{
		wait:     sleepContext,
		draw:     func(max time.Duration) time.Duration { return rand.N(max) },
		now:      time.Now,
		deadline: afterFunc,
	}
}

// firstAnswerDeadline bounds a list or watch made after a loss: one not
// answered by then is abandoned and counts as failed (the next waits
// again). A starting API server accepts connections before it serves
// them, and answers every request queued meanwhile in the same instant;
// with the deadline, only the nodes that asked in the last moment before
// it began serving are in that instant, the others come after their next
// random wait.
const firstAnswerDeadline = time.Second

// errAbandoned is the error of a call abandoned at firstAnswerDeadline.
var errAbandoned = errors.New("no answer from the API server within the first answer deadline after a lost connection")

// call runs one list (watchTimeout 0) or watch (with the timeout it asks
// the server for), after the spread wait when the previous call failed or
// the previous watch ended early, and then with firstAnswerDeadline. The
// informer makes one call at a time and the next only once the watch
// before it ended. do gets the context to make the request with; release
// cancels it and must be called once what do got is no longer used (a
// list at once, a watch when it is stopped).
func (r *reconnects) call(ctx context.Context, watchTimeout time.Duration, do func(context.Context) error) (release func(), err error) {
	r.mu.Lock()
	// A watch ended before most of its timeout: the server ended it (it
	// is stopping, or it dropped the connection).
	early := r.watchTimeout > 0 && r.now().Sub(r.watchStart) < r.watchTimeout*9/10
	lost := r.lost || early
	r.watchTimeout = 0
	r.mu.Unlock()
	callCtx, cancel := context.WithCancel(ctx)
	if lost {
		if err := r.wait(ctx, r.draw(ReconnectSpread)); err != nil {
			cancel()
			return func() {}, err
		}
		var abandoned atomic.Bool
		stop := r.deadline(firstAnswerDeadline, func() {
			abandoned.Store(true)
			cancel()
		})
		err = do(callCtx)
		stop()
		if abandoned.Load() {
			err = errAbandoned
		}
	} else {
		err = do(callCtx)
	}
	r.mu.Lock()
	// A call cut short by its own context (the publisher stopping) says
	// nothing about the server.
	r.lost = err != nil && ctx.Err() == nil
	if err == nil && watchTimeout > 0 {
		r.watchStart, r.watchTimeout = r.now(), watchTimeout
	}
	r.mu.Unlock()
	if err != nil {
		cancel()
	}
	return cancel, err
}

// afterFunc runs f after d unless the returned stop comes first; stop
// waits for nothing.
func afterFunc(d time.Duration, f func()) (stop func()) {
	t := time.AfterFunc(d, f)
	return func() { t.Stop() }
}

func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
