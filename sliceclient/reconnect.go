package sliceclient

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// ReconnectSpread is the longest a slice list or watch waits after one
// that failed, before it asks the API server again.
//
// When the API server restarts, every node's agent loses its watch at the
// same instant, and client-go's reflector asks again after the same short
// back-off on each of them: a fleet came back within one second (100 of
// 100 nodes, compat/fleet). A wait drawn uniformly from [0, ReconnectSpread)
// on each node spreads them over this window instead. Only a failed call
// is followed by a wait: a watch the server ends in the normal course (its
// timeout) is renewed at once, and nothing waits while the server answers.
const ReconnectSpread = 5 * time.Second

// reconnects spreads the calls that follow a failed list or watch.
type reconnects struct {
	mu     sync.Mutex
	failed bool
	// wait sleeps for d or until ctx ends; draw picks the wait. Tests
	// replace them.
	wait func(ctx context.Context, d time.Duration) error
	draw func(max time.Duration) time.Duration
}

func newReconnects() *reconnects {
	return &reconnects{
		wait: sleepContext,
		draw: func(max time.Duration) time.Duration { return rand.N(max) },
	}
}

// call runs one list or watch, after the spread wait when the previous one
// failed.
func (r *reconnects) call(ctx context.Context, do func() error) error {
	r.mu.Lock()
	failed := r.failed
	r.mu.Unlock()
	if failed {
		if err := r.wait(ctx, r.draw(ReconnectSpread)); err != nil {
			return err
		}
	}
	err := do()
	r.mu.Lock()
	// A call cut short by its own context (the publisher stopping) says
	// nothing about the server.
	r.failed = err != nil && ctx.Err() == nil
	r.mu.Unlock()
	return err
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
