package sliceclient

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestReconnectsWaitAfterAFailure: a call after a failed one waits the
// drawn part of ReconnectSpread; calls after a success, and the first
// call, do not; a call cut short by its own context does not count as a
// failure.
func TestReconnectsWaitAfterAFailure(t *testing.T) {
	r := newReconnects()
	var waits []time.Duration
	r.wait = func(_ context.Context, d time.Duration) error {
		waits = append(waits, d)
		return nil
	}
	r.draw = func(max time.Duration) time.Duration {
		if max != ReconnectSpread {
			t.Errorf("drawn from [0, %v), want [0, %v)", max, ReconnectSpread)
		}
		return 1234 * time.Millisecond
	}
	refused := errors.New("connection refused")
	ctx := context.Background()
	steps := []struct {
		err      error
		wantWait bool
	}{
		{nil, false},     // first call
		{refused, false}, // after a success
		{refused, true},  // after a failure
		{nil, true},      // after a failure
		{nil, false},     // after a success
	}
	for i, s := range steps {
		before := len(waits)
		if err := r.call(ctx, func() error { return s.err }); !errors.Is(err, s.err) {
			t.Fatalf("step %d: call returned %v, want %v", i, err, s.err)
		}
		if waited := len(waits) > before; waited != s.wantWait {
			t.Fatalf("step %d: waited %v, want %v", i, waited, s.wantWait)
		}
	}
	for _, w := range waits {
		if w != 1234*time.Millisecond {
			t.Fatalf("waited %v, want the drawn 1.234s", w)
		}
	}

	stopping, cancel := context.WithCancel(ctx)
	cancel()
	_ = r.call(stopping, func() error { return stopping.Err() })
	before := len(waits)
	_ = r.call(ctx, func() error { return nil })
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
	r.failed = true
	r.draw = func(time.Duration) time.Duration { return time.Hour }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	err := r.call(ctx, func() error { called = true; return nil })
	if !errors.Is(err, context.Canceled) || called {
		t.Fatalf("call returned %v, called %v; want context.Canceled before the call", err, called)
	}
}
