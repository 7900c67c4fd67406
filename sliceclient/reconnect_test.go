package sliceclient

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestReconnectsWaitAfterALoss: a call after a failed one, or after a
// watch that ended early, waits the drawn part of ReconnectSpread; the
// first call, calls after a success, and a watch renewed after its
// timeout do not; a call cut short by its own context does not count as a
// failure.
func TestReconnectsWaitAfterALoss(t *testing.T) {
	r := newReconnects()
	clock := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return clock }
	var waits []time.Duration
	r.wait = func(_ context.Context, d time.Duration) error {
		waits = append(waits, d)
		return nil
	}
	r.deadline = func(time.Duration, func()) func() { return func() {} } // never fires
	r.draw = func(max time.Duration) time.Duration {
		if max != ReconnectSpread {
			t.Errorf("drawn from [0, %v), want [0, %v)", max, ReconnectSpread)
		}
		return 1234 * time.Millisecond
	}
	refused := errors.New("connection refused")
	const timeout = 10 * time.Minute
	steps := []struct {
		name     string
		elapsed  time.Duration // since the step before
		watch    time.Duration // the timeout asked for; 0: a list
		err      error
		wantWait bool
	}{
		{"first list", 0, 0, nil, false},
		{"list after a success", 0, 0, refused, false},
		{"list after a failure", 0, 0, nil, true},
		{"watch after a list", 0, timeout, nil, false},
		{"watch renewed after its timeout", timeout, timeout, nil, false},
		{"watch after one ended early (server stopping)", time.Minute, timeout, refused, true},
		{"watch after a failed one", 0, timeout, nil, true},
		{"list after a watch ended early", 8 * time.Minute, 0, nil, true},
		{"watch after a list", 0, timeout, nil, false},
	}
	for _, s := range steps {
		clock = clock.Add(s.elapsed)
		before := len(waits)
		release, err := r.call(context.Background(), s.watch, func(context.Context) error { return s.err })
		release()
		if !errors.Is(err, s.err) {
			t.Fatalf("%s: call returned %v, want %v", s.name, err, s.err)
		}
		if waited := len(waits) > before; waited != s.wantWait {
			t.Fatalf("%s: waited %v, want %v", s.name, waited, s.wantWait)
		}
	}
	for _, w := range waits {
		if w != 1234*time.Millisecond {
			t.Fatalf("waited %v, want the drawn 1.234s", w)
		}
	}

	stopping, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = r.call(stopping, 0, func(context.Context) error { return stopping.Err() })
	before := len(waits)
	_, _ = r.call(context.Background(), 0, func(context.Context) error { return nil })
	if len(waits) != before {
		t.Fatal("a call cut short by its own context made the next one wait")
	}
}

// TestReconnectsDrawSpreads: the default draw stays within
// [0, ReconnectSpread) and is not one value (a fleet would come back
// together).
func TestReconnectsDrawSpreads(t *testing.T) {
	r := newReconnects()
	seen := map[time.Duration]bool{}
	for range 100 {
		d := r.draw(ReconnectSpread)
		if d < 0 || d >= ReconnectSpread {
			t.Fatalf("drew %v, outside [0, %v)", d, ReconnectSpread)
		}
		seen[d] = true
	}
	if len(seen) < 50 {
		t.Fatalf("100 draws gave %d distinct waits", len(seen))
	}
}

// TestReconnectsWaitEndsWithContext: a stopping publisher is not held by
// the wait.
func TestReconnectsWaitEndsWithContext(t *testing.T) {
	r := newReconnects()
	r.lost = true
	r.draw = func(time.Duration) time.Duration { return time.Hour }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	_, err := r.call(ctx, 0, func(context.Context) error { called = true; return nil })
	if !errors.Is(err, context.Canceled) || called {
		t.Fatalf("call returned %v, called %v; want context.Canceled before the call", err, called)
	}
}

// TestReconnectsAbandonUnansweredCall: after a loss, a call not answered
// by the deadline is abandoned (its context cancelled) and counts as
// failed, so the next waits again; a call after a success has no deadline;
// an answered call's context lives until released.
func TestReconnectsAbandonUnansweredCall(t *testing.T) {
	r := newReconnects()
	r.lost = true
	r.wait = func(context.Context, time.Duration) error { return nil }
	fire := make(chan func(), 1)
	r.deadline = func(d time.Duration, f func()) func() {
		if d != firstAnswerDeadline {
			t.Errorf("deadline %v, want %v", d, firstAnswerDeadline)
		}
		fire <- f
		return func() {}
	}
	// The server holds the request: the test fires the deadline, which
	// must cancel the request's context.
	_, err := r.call(context.Background(), time.Minute, func(ctx context.Context) error {
		(<-fire)()
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, errAbandoned) {
		t.Fatalf("unanswered call returned %v, want errAbandoned", err)
	}
	if !r.lost {
		t.Fatal("an abandoned call did not count as failed")
	}
	// Answered in time (the deadline never fires): its context stays
	// usable until release.
	var callCtx context.Context
	release, err := r.call(context.Background(), 0, func(ctx context.Context) error {
		<-fire // armed, not fired
		callCtx = ctx
		return nil
	})
	if err != nil || callCtx.Err() != nil {
		t.Fatalf("answered call: %v, its context %v", err, callCtx.Err())
	}
	release()
	if callCtx.Err() == nil {
		t.Fatal("release left the call's context live")
	}
	// After a success there is no deadline at all.
	r.deadline = func(time.Duration, func()) func() {
		t.Error("a deadline after a success")
		return func() {}
	}
	release, err = r.call(context.Background(), 0, func(context.Context) error { return nil })
	release()
	if err != nil {
		t.Fatal(err)
	}
}
