package sliceclient

import (
	"runtime"
	"testing"
	"time"
)

// The point of delayQueue: nothing runs while nothing waits, where
// client-go's delaying queue keeps a goroutine that wakes every 10 s.
func TestDelayQueueRunsNothingAtRest(t *testing.T) {
	before := runtime.NumGoroutine()
	q := newDelayQueue("test")
	defer q.ShutDown()
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("goroutines: %d before newDelayQueue, %d after", before, after)
	}
	q.AddAfter("pool", time.Millisecond)
	if got := q.waits(); got != 1 {
		t.Fatalf("waits = %d after AddAfter, want 1", got)
	}
	if pool, shutdown := q.Get(); shutdown || pool != "pool" {
		t.Fatalf("Get = %q, %v; want pool, false", pool, shutdown)
	}
	q.Done("pool")
	if got := q.waits(); got != 0 {
		t.Errorf("waits = %d once the pool was added, want 0: a timer outlives its wait", got)
	}
}

func TestDelayQueueAddAfter(t *testing.T) {
	tests := []struct {
		name   string
		delays []time.Duration // AddAfter("pool", d) in this order
		// within is the bound on when the pool is due after the calls: the
		// earliest delay wins.
		within time.Duration
	}{
		{name: "not positive adds at once", delays: []time.Duration{0}},
		{name: "negative adds at once", delays: []time.Duration{-time.Second}},
		{name: "one wait", delays: []time.Duration{time.Millisecond}, within: time.Minute},
		{name: "an earlier add replaces a later one", delays: []time.Duration{time.Hour, time.Millisecond}, within: time.Minute},
		{name: "a later add does not put off an earlier one", delays: []time.Duration{time.Millisecond, time.Hour}, within: time.Minute},
		{name: "an add at once beats a wait", delays: []time.Duration{time.Hour, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newDelayQueue("test")
			defer q.ShutDown()
			start := time.Now()
			for _, d := range tt.delays {
				q.AddAfter("pool", d)
			}
			if tt.within == 0 {
				if q.Len() != 1 {
					t.Fatalf("Len = %d right after the adds, want 1", q.Len())
				}
			} else {
				// Queued already (a short wait can end between two adds),
				// or due within the bound.
				q.mu.Lock()
				w := q.waiting["pool"]
				q.mu.Unlock()
				if q.Len() == 0 && (w == nil || w.at.Sub(start) > tt.within) {
					t.Fatalf("pool neither queued nor due within %v of the adds (wait: %+v)", tt.within, w)
				}
			}
			pool, shutdown := q.Get() // blocks until the wait ends
			if shutdown || pool != "pool" {
				t.Fatalf("Get = %q, %v; want pool, false", pool, shutdown)
			}
			q.Done("pool")
			if q.Len() != 0 {
				t.Errorf("Len = %d after the pool was taken, want 0: it was added twice", q.Len())
			}
		})
	}
}

func TestDelayQueueShutDownStopsWaits(t *testing.T) {
	for _, drain := range []bool{false, true} {
		q := newDelayQueue("test")
		q.AddAfter("pool", time.Hour)
		if drain {
			q.ShutDownWithDrain()
		} else {
			q.ShutDown()
		}
		if got := q.waits(); got != 0 {
			t.Errorf("drain %v: waits = %d after shutdown, want 0", drain, got)
		}
		q.AddAfter("other", time.Hour)
		if got := q.waits(); got != 0 {
			t.Errorf("drain %v: AddAfter after shutdown made a wait", drain)
		}
		if _, shutdown := q.Get(); !shutdown {
			t.Errorf("drain %v: Get after shutdown did not report it", drain)
		}
	}
}

// A wait's timer that fires after an earlier AddAfter replaced it, or after
// its pool was added at once, must not add the pool again.
func TestDelayQueueReplacedWaitAddsNothing(t *testing.T) {
	q := newDelayQueue("test")
	defer q.ShutDown()
	q.AddAfter("pool", time.Hour)
	q.mu.Lock()
	replaced := q.waiting["pool"]
	q.mu.Unlock()
	q.AddAfter("pool", time.Millisecond)
	if pool, _ := q.Get(); pool != "pool" {
		t.Fatalf("Get = %q", pool)
	}
	q.Done("pool")
	q.ready("pool", replaced) // the replaced timer, had Stop come too late
	if q.Len() != 0 {
		t.Errorf("Len = %d after a replaced wait ended, want 0", q.Len())
	}
}

// waits is how many pools wait to be added.
func (q *delayQueue) waits() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}
