package claimcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestConcurrentManyClaims runs the full lifecycle on many claims from many
// goroutines, with readers and garbage collection listing alongside, and
// checks that memory and disk agree at the end.
func TestConcurrentManyClaims(t *testing.T) {
	dir := t.TempDir()
	c, _ := openT(t, dir, bootOne)
	const workers, claimsEach = 24, 12
	var wg sync.WaitGroup
	errs := make(chan error, workers*claimsEach)
	for w := range workers {
		wg.Go(func() {
			for k := range claimsEach {
				ref := ClaimRef{Namespace: fmt.Sprint("ns-", w%3), Name: fmt.Sprintf("c-%d-%d", w, k), UID: fmt.Sprintf("u-%d-%d", w, k)}
				pod := fmt.Sprint("pod-", w)
				devs := map[string][]Device{"d.example.com": {{Pool: "p", Device: ref.UID, CDIDeviceIDs: []string{"example.com/d=" + ref.UID}}}}
				if _, err := c.StartPrepare(ref, pod); err != nil {
					errs <- err
					return
				}
				if e, err := c.FinishPrepare(ref.UID, devs); err != nil || !reflect.DeepEqual(e.Drivers, devs) {
					errs <- fmt.Errorf("FinishPrepare %s: %+v, %v", ref.UID, e, err)
					return
				}
				// Every third claim stays prepared; the rest go all the way.
				if k%3 == 0 {
					continue
				}
				if e, err := c.StartUnprepare(ref.UID); err != nil || !reflect.DeepEqual(e.Drivers, devs) {
					errs <- fmt.Errorf("StartUnprepare %s: %+v, %v", ref.UID, e, err)
					return
				}
				if err := c.Remove(ref.UID); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, e := range c.List() {
					if got, err := c.Get(e.Claim.UID); err == nil && got.Claim != e.Claim {
						errs <- fmt.Errorf("Get(%s) returned claim %v", e.Claim.UID, got.Claim)
					}
				}
				if _, err := c.Gone(func(ClaimRef) (bool, error) { return true, nil }); err != nil {
					errs <- err
				}
				time.Sleep(time.Millisecond) // leave the CPUs to the writers
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	want := workers * ((claimsEach + 2) / 3)
	if n := c.Len(); n != want {
		t.Fatalf("%d entries left, want %d", n, want)
	}
	if n := c.claimLocks.held(); n != 0 {
		t.Fatalf("%d claim locks still allocated", n)
	}
	inMemory := c.List()
	c.Close()
	c, _ = openT(t, dir, bootOne)
	defer c.Close()
	if restored := c.List(); !reflect.DeepEqual(restored, inMemory) {
		t.Fatalf("restored state differs from memory: %d vs %d entries", len(restored), len(inMemory))
	}
}

// TestConcurrentOneClaim has many goroutines change the pods of one claim at
// once: a lost update (two read-modify-writes interleaved) would lose a pod.
func TestConcurrentOneClaim(t *testing.T) {
	dir := t.TempDir()
	c, _ := openT(t, dir, bootOne)
	if _, err := c.StartPrepare(claimA, ""); err != nil {
		t.Fatal(err)
	}
	const workers, podsEach = 16, 8
	var wg sync.WaitGroup
	var want []string
	var mu sync.Mutex
	for w := range workers {
		wg.Go(func() {
			for p := range podsEach {
				pod := fmt.Sprintf("pod-%02d-%02d", w, p)
				if _, err := c.AddPod(claimA.UID, pod); err != nil {
					t.Error(err)
					return
				}
				if p%2 == 1 {
					if _, err := c.RemovePod(claimA.UID, pod); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				mu.Lock()
				want = append(want, pod)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(want)
	e, _ := c.Get(claimA.UID)
	if !slices.Equal(e.PodUIDs, want) {
		t.Fatalf("pods: got %d %v\nwant %d %v", len(e.PodUIDs), e.PodUIDs, len(want), want)
	}
	c.Close()
	c, _ = openT(t, dir, bootOne)
	defer c.Close()
	if e, _ := c.Get(claimA.UID); !slices.Equal(e.PodUIDs, want) {
		t.Fatalf("restored pods differ: %v", e.PodUIDs)
	}
}

// TestConcurrentTransitionsOneClaim races every operation on one claim. Each
// result must be a legal one, and what is on disk must be what is in memory:
// if two operations on the claim interleaved, the journal's order and the
// memory's order could disagree.
func TestConcurrentTransitionsOneClaim(t *testing.T) {
	dir := t.TempDir()
	c, _ := openT(t, dir, bootOne)
	const workers, opsEach = 12, 60
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range opsEach {
				var err error
				var e Entry
				var want State
				switch rng.IntN(5) {
				case 0:
					e, err = c.StartPrepare(claimA, fmt.Sprint("pod-", w))
					want = PrepareStarted
				case 1:
					e, err = c.FinishPrepare(claimA.UID, gpuDevices)
					want = Prepared
				case 2:
					e, err = c.StartUnprepare(claimA.UID)
					want = UnprepareStarted
				case 3:
					err = c.Remove(claimA.UID)
				case 4:
					e, err = c.AddPod(claimA.UID, fmt.Sprint("pod-", w))
					if err == nil && !slices.Contains(e.PodUIDs, fmt.Sprint("pod-", w)) {
						t.Errorf("AddPod returned %+v without the pod", e)
					}
				}
				switch {
				case err == nil && want != "" && e.State != want:
					t.Errorf("operation returned state %s, want %s", e.State, want)
				case err != nil && !errors.Is(err, ErrIllegalTransition) && !errors.Is(err, ErrNotFound):
					t.Errorf("unexpected error: %v", err)
				}
			}
		})
	}
	wg.Wait()
	inMemory := c.List()
	c.Close()
	c, _ = openT(t, dir, bootOne)
	defer c.Close()
	if restored := c.List(); !reflect.DeepEqual(restored, inMemory) {
		t.Fatalf("disk and memory disagree:\n disk %+v\n mem  %+v", restored, inMemory)
	}
}

// TestConcurrentSameNameNewUIDs: many UIDs race for one namespace/name;
// exactly one may win, the others learn who did.
func TestConcurrentSameNameNewUIDs(t *testing.T) {
	c, _ := openT(t, t.TempDir(), bootOne)
	defer c.Close()
	const racers = 32
	results := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			_, results[i] = c.StartPrepare(ClaimRef{Namespace: "ns", Name: "contested", UID: fmt.Sprint("uid-", i)}, "")
		})
	}
	wg.Wait()
	winner, err := c.LookupName("ns", "contested")
	if err != nil {
		t.Fatal(err)
	}
	wins := 0
	for i, err := range results {
		var mismatch *UIDMismatchError
		switch {
		case err == nil:
			wins++
			if winner.Claim.UID != fmt.Sprint("uid-", i) {
				t.Errorf("racer %d succeeded but %s is recorded", i, winner.Claim.UID)
			}
		case errors.As(err, &mismatch):
			if mismatch.RecordedUID != winner.Claim.UID {
				t.Errorf("racer %d told %s won, but %s did", i, mismatch.RecordedUID, winner.Claim.UID)
			}
		default:
			t.Errorf("racer %d: %v", i, err)
		}
	}
	if wins != 1 || c.Len() != 1 {
		t.Fatalf("%d winners, %d entries; want exactly one", wins, c.Len())
	}
}

// TestConcurrentDropGone races garbage collection with operations on the
// claims it collects: an entry changed meanwhile must survive.
func TestConcurrentDropGone(t *testing.T) {
	c, _ := openT(t, t.TempDir(), bootOne)
	defer c.Close()
	const n = 40
	for i := range n {
		if _, err := c.StartPrepare(ClaimRef{Namespace: "ns", Name: fmt.Sprint("c", i), UID: fmt.Sprint("u", i)}, ""); err != nil {
			t.Fatal(err)
		}
	}
	// While DropGone asks about the claims, another goroutine finishes the
	// even ones; the exists function waits for that to happen first.
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i := 0; i < n; i += 2 {
			if _, err := c.FinishPrepare(fmt.Sprint("u", i), nil); err != nil {
				t.Error(err)
			}
		}
	}()
	first := true
	dropped, err := c.DropGone(func(ClaimRef) (bool, error) {
		if first {
			<-finished
			first = false
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dropped) != n/2 {
		t.Fatalf("dropped %d, want the %d untouched ones", len(dropped), n/2)
	}
	for _, e := range dropped {
		if e.State != PrepareStarted {
			t.Errorf("dropped a claim changed meanwhile: %+v", e)
		}
	}
	for _, e := range c.List() {
		if e.State != Prepared {
			t.Errorf("kept %+v, want only the finished ones", e)
		}
	}
}
