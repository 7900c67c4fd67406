package claimcache

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// TestWithClaimSerializesOneClaim runs many WithClaim calls on one UID: at
// most one fn runs at a time (counted, and checked by the race detector on
// the plain counter they share), every fn runs, and no lock is left.
func TestWithClaimSerializesOneClaim(t *testing.T) {
	c, _ := openT(t, t.TempDir(), bootOne)
	defer c.Close()
	const calls = 64
	var inside atomic.Int32
	var overlaps atomic.Int32
	total := 0 // unsynchronized on purpose: only the lock guards it
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			err := c.WithClaim("uid-1", func() error {
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				runtime.Gosched() // give another holder the chance to overlap
				total++
				inside.Add(-1)
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d calls ran while another held the lock of the same claim", n)
	}
	if total != calls {
		t.Errorf("%d calls ran, want %d", total, calls)
	}
	if n := c.callerLocks.held(); n != 0 {
		t.Errorf("%d caller locks still allocated", n)
	}
}

// TestWithClaimOtherClaimsConcurrent holds one claim's lock until a
// WithClaim on another claim has run inside it: if different claims were
// serialized, this would never finish.
func TestWithClaimOtherClaimsConcurrent(t *testing.T) {
	c, _ := openT(t, t.TempDir(), bootOne)
	defer c.Close()
	otherRan := make(chan struct{})
	var wg sync.WaitGroup
	err := c.WithClaim("uid-a", func() error {
		wg.Go(func() {
			if err := c.WithClaim("uid-b", func() error { close(otherRan); return nil }); err != nil {
				t.Error(err)
			}
		})
		<-otherRan
		return nil
	})
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
}

// TestWithClaimCacheMethodsInside runs a whole lifecycle of the claim inside
// its WithClaim: the Cache's own per-claim lock is another one.
func TestWithClaimCacheMethodsInside(t *testing.T) {
	c, _ := openT(t, t.TempDir(), bootOne)
	defer c.Close()
	ref := ClaimRef{Namespace: "ns", Name: "claim", UID: "uid-1"}
	err := c.WithClaim(ref.UID, func() error {
		if _, err := c.StartPrepare(ref, "pod-1"); err != nil {
			return err
		}
		if _, err := c.FinishPrepare(ref.UID, gpuDevices); err != nil {
			return err
		}
		e, err := c.Get(ref.UID)
		if err != nil {
			return err
		}
		if e.State != Prepared {
			return fmt.Errorf("state %s after FinishPrepare, want %s", e.State, Prepared)
		}
		if _, err := c.StartUnprepare(ref.UID); err != nil {
			return err
		}
		return c.Remove(ref.UID)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Len(); n != 0 {
		t.Errorf("%d entries left, want 0", n)
	}
}

func TestWithClaimResults(t *testing.T) {
	c, _ := openT(t, t.TempDir(), bootOne)
	defer c.Close()
	errDriver := errors.New("driver failed")
	for _, tc := range []struct {
		name    string
		uid     string
		fn      func() error
		want    error
		wantRun bool
	}{
		{name: "nil from fn", uid: "u", fn: func() error { return nil }, want: nil, wantRun: true},
		{name: "fn's error", uid: "u", fn: func() error { return errDriver }, want: errDriver, wantRun: true},
		{name: "wrapped error kept", uid: "u", fn: func() error { return fmt.Errorf("prepare: %w", errDriver) }, want: errDriver, wantRun: true},
		{name: "empty UID", uid: "", fn: func() error { return nil }, want: ErrInvalidArgument},
		{name: "nil fn", uid: "u", fn: nil, want: ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran := false
			fn := tc.fn
			if fn != nil {
				fn = func() error { ran = true; return tc.fn() }
			}
			err := c.WithClaim(tc.uid, fn)
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
			if ran != tc.wantRun {
				t.Errorf("fn ran: %v, want %v", ran, tc.wantRun)
			}
			if n := c.callerLocks.held(); n != 0 {
				t.Errorf("%d caller locks still allocated", n)
			}
		})
	}
}

// A panicking fn releases the lock: the next WithClaim on the claim runs.
func TestWithClaimPanicReleases(t *testing.T) {
	c, _ := openT(t, t.TempDir(), bootOne)
	defer c.Close()
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the panic of fn", r)
			}
		}()
		c.WithClaim("uid-1", func() error { panic("boom") })
	}()
	if n := c.callerLocks.held(); n != 0 {
		t.Errorf("%d caller locks still allocated after a panic", n)
	}
	ran := false
	if err := c.WithClaim("uid-1", func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("WithClaim after a panic: ran %v, error %v", ran, err)
	}
}

// TestLockClaimIsWithClaimsLock: while LockClaim holds a claim, a
// WithClaim of the same claim waits for unlock and then runs; an empty UID
// is refused; no lock is left.
func TestLockClaimIsWithClaimsLock(t *testing.T) {
	c, _ := openT(t, t.TempDir(), bootOne)
	defer c.Close()
	if _, err := c.LockClaim(""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("LockClaim(\"\"): %v, want ErrInvalidArgument", err)
	}
	unlock, err := c.LockClaim("uid-1")
	if err != nil {
		t.Fatal(err)
	}
	unlocked := false // guarded by the claim's lock: the race detector checks it
	ran := make(chan error)
	go func() {
		ran <- c.WithClaim("uid-1", func() error {
			if !unlocked {
				return errors.New("WithClaim ran while LockClaim held the claim")
			}
			return nil
		})
	}()
	// The goroutine holds or waits for the claim's lock: it is allocated
	// twice over. Give it every chance to run too early.
	for c.callerLocks.refs("uid-1") < 2 {
		runtime.Gosched()
	}
	unlocked = true
	unlock()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if n := c.callerLocks.held(); n != 0 {
		t.Errorf("%d caller locks still allocated", n)
	}
}
