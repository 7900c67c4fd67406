package claimcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dranode/dranode/checkpoint"
)

const holdDriver = "gpu.example.com"

var (
	holderA = ClaimRef{Namespace: "team-a", Name: "old", UID: "uid-a"}
	claimB  = ClaimRef{Namespace: "team-b", Name: "new", UID: "uid-b"}
)

// dev is one device of holdDriver in pool node-a.
func dev(name, shareID string, admin bool) map[string][]Device {
	return map[string][]Device{holdDriver: {{Pool: "node-a", Device: name, Requests: []string{"gpu"}, ShareID: shareID, AdminAccess: admin}}}
}

func shareAll(string, string, string) PublishedDevice {
	return PublishedDevice{Listed: true, AllowMultipleAllocations: true}
}

func shareNone(string, string, string) PublishedDevice { return PublishedDevice{Listed: true} }

// prepareA records holderA with devs through the whole prepare (Hold,
// StartPrepare, FinishPrepare, release) and leaves it in state.
func prepareA(t *testing.T, c *Cache, devs map[string][]Device, state State) {
	t.Helper()
	h, err := c.Hold(holderA, devs, shareAll)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if _, err := c.StartPrepare(holderA, "pod-a"); err != nil {
		t.Fatal(err)
	}
	if state == PrepareStarted {
		return
	}
	if _, err := c.FinishPrepare(holderA.UID, devs); err != nil {
		t.Fatal(err)
	}
	if state == UnprepareStarted {
		if _, err := c.StartUnprepare(holderA.UID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHold: which holds of one device by two claims conflict, and what the
// refusal says.
func TestHold(t *testing.T) {
	for _, tc := range []struct {
		name      string
		setup     func(t *testing.T, c *Cache)
		claim     ClaimRef
		devs      map[string][]Device
		published Published
		// wantState is the holder's state in the refusal ("-": no refusal;
		// "": the holder is only being prepared, not recorded).
		wantState State
		uncertain bool
	}{
		{name: "free device", setup: func(*testing.T, *Cache) {}, claim: claimB, devs: dev("gpu-0", "", false), wantState: "-"},
		{name: "prepared by another claim", setup: func(t *testing.T, c *Cache) { prepareA(t, c, dev("gpu-0", "", false), Prepared) },
			claim: claimB, devs: dev("gpu-0", "", false), wantState: Prepared},
		{name: "another device of the same driver", setup: func(t *testing.T, c *Cache) { prepareA(t, c, dev("gpu-0", "", false), Prepared) },
			claim: claimB, devs: dev("gpu-1", "", false), wantState: "-"},
		{name: "the same device name of another driver", setup: func(t *testing.T, c *Cache) { prepareA(t, c, dev("gpu-0", "", false), Prepared) },
			claim: claimB, devs: map[string][]Device{"other.example.com": {{Pool: "node-a", Device: "gpu-0"}}}, wantState: "-"},
		{name: "the same claim again", setup: func(t *testing.T, c *Cache) { prepareA(t, c, dev("gpu-0", "", false), Prepared) },
			claim: holderA, devs: dev("gpu-0", "", false), wantState: "-"},
		{name: "interrupted prepare holds", setup: func(t *testing.T, c *Cache) { prepareA(t, c, dev("gpu-0", "", false), PrepareStarted) },
			claim: claimB, devs: dev("gpu-0", "", false), wantState: PrepareStarted},
		{name: "failed unprepare holds", setup: func(t *testing.T, c *Cache) { prepareA(t, c, dev("gpu-0", "", false), UnprepareStarted) },
			claim: claimB, devs: dev("gpu-0", "", false), wantState: UnprepareStarted},
		{name: "uncertain entry holds", setup: func(t *testing.T, c *Cache) {
			if _, err := c.RecordUncertain(holderA, dev("gpu-0", "", false), "lost in a test"); err != nil {
				t.Fatal(err)
			}
		}, claim: claimB, devs: dev("gpu-0", "", false), wantState: PrepareStarted, uncertain: true},
		{name: "prepare in flight holds", setup: func(t *testing.T, c *Cache) {
			if _, err := c.Hold(holderA, dev("gpu-0", "", false), nil); err != nil {
				t.Fatal(err)
			}
		}, claim: claimB, devs: dev("gpu-0", "", false), wantState: ""},
		{name: "unprepared claim holds nothing", setup: func(t *testing.T, c *Cache) {
			prepareA(t, c, dev("gpu-0", "", false), UnprepareStarted)
			if err := c.Remove(holderA.UID); err != nil {
				t.Fatal(err)
			}
		}, claim: claimB, devs: dev("gpu-0", "", false), wantState: "-"},
		{name: "admin access beside a prepared claim", setup: func(t *testing.T, c *Cache) { prepareA(t, c, dev("gpu-0", "", false), Prepared) },
			claim: claimB, devs: dev("gpu-0", "", true), wantState: "-"},
		{name: "a claim beside an admin access claim", setup: func(t *testing.T, c *Cache) { prepareA(t, c, dev("gpu-0", "", true), Prepared) },
			claim: claimB, devs: dev("gpu-0", "", false), wantState: "-"},
		{name: "distinct shares", setup: func(t *testing.T, c *Cache) { prepareA(t, c, dev("gpu-0", "share-1", false), Prepared) },
			claim: claimB, devs: dev("gpu-0", "share-2", false), published: shareAll, wantState: "-"},
		{name: "the same share", setup: func(t *testing.T, c *Cache) { prepareA(t, c, dev("gpu-0", "share-1", false), Prepared) },
			claim: claimB, devs: dev("gpu-0", "share-1", false), published: shareAll, wantState: Prepared},
		{name: "distinct shares of a device not published as shareable", setup: func(t *testing.T, c *Cache) { prepareA(t, c, dev("gpu-0", "share-1", false), Prepared) },
			claim: claimB, devs: dev("gpu-0", "share-2", false), published: shareNone, wantState: Prepared},
		{name: "distinct shares without a Published function", setup: func(t *testing.T, c *Cache) { prepareA(t, c, dev("gpu-0", "share-1", false), Prepared) },
			claim: claimB, devs: dev("gpu-0", "share-2", false), wantState: Prepared},
		{name: "a share of a device held whole", setup: func(t *testing.T, c *Cache) { prepareA(t, c, dev("gpu-0", "", false), Prepared) },
			claim: claimB, devs: dev("gpu-0", "share-2", false), published: shareAll, wantState: Prepared},
		{name: "the whole device while a share is held", setup: func(t *testing.T, c *Cache) { prepareA(t, c, dev("gpu-0", "share-1", false), Prepared) },
			claim: claimB, devs: dev("gpu-0", "", false), published: shareAll, wantState: Prepared},
		{name: "the old claim of the same name holds", setup: func(t *testing.T, c *Cache) { prepareA(t, c, dev("gpu-0", "", false), Prepared) },
			claim: ClaimRef{Namespace: holderA.Namespace, Name: holderA.Name, UID: "uid-a2"}, devs: dev("gpu-0", "", false), wantState: Prepared},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := openT(t, t.TempDir(), bootOne)
			defer c.Close()
			tc.setup(t, c)
			h, err := c.Hold(tc.claim, tc.devs, tc.published)
			if tc.wantState == "-" {
				if err != nil {
					t.Fatalf("Hold: %v, want no conflict", err)
				}
				h.Release()
				return
			}
			var inUse *DeviceInUseError
			if !errors.As(err, &inUse) || !errors.Is(err, ErrDeviceInUse) {
				t.Fatalf("Hold: %v, want a *DeviceInUseError matching ErrDeviceInUse", err)
			}
			if inUse.Holder != holderA || inUse.Claim != tc.claim || inUse.HolderState != tc.wantState || inUse.HolderUncertain != tc.uncertain ||
				inUse.Driver != holdDriver || inUse.Pool != "node-a" || inUse.Device != "gpu-0" {
				t.Errorf("refusal %+v, want holder %v in state %q (uncertain %v) of %s/node-a/gpu-0", inUse, holderA, tc.wantState, tc.uncertain, holdDriver)
			}
			msg := err.Error()
			for _, want := range []string{"device gpu.example.com/node-a/gpu-0", "team-a/old (uid uid-a", tc.claim.Namespace + "/" + tc.claim.Name + " (uid " + tc.claim.UID + ")", "once that claim is unprepared"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not say %q", msg, want)
				}
			}
			// Nothing was held for the refused claim.
			if got := c.Holders(holdDriver, "node-a", "gpu-0"); len(got) != 1 || got[0] != holderA {
				t.Errorf("holders after the refusal: %v, want only %v", got, holderA)
			}
		})
	}
}

// TestHoldReleasedByTheRecord: a hold ends with its Release once the
// record has no entry for the claim, and lasts through the record while it
// has one; StartPrepare records the held devices, which a reopen (a
// restart or a new instance) still holds.
func TestHoldReleasedByTheRecord(t *testing.T) {
	dir := t.TempDir()
	c, _ := openT(t, dir, bootOne)
	h, err := c.Hold(holderA, dev("gpu-0", "", false), nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.StartPrepare(holderA, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Drivers[holdDriver]; len(got) != 1 || got[0].Device != "gpu-0" || len(got[0].CDIDeviceIDs) != 0 {
		t.Fatalf("PrepareStarted records devices %+v, want the held gpu-0", e.Drivers)
	}
	h.Release()
	h.Release() // a second release does nothing
	if _, err := c.Hold(claimB, dev("gpu-0", "", false), nil); !errors.Is(err, ErrDeviceInUse) {
		t.Fatalf("after the release, the PrepareStarted entry does not hold: %v", err)
	}
	crash(t, c)

	c, rep := openT(t, dir, bootOne)
	if len(rep.Interrupted) != 1 {
		t.Fatalf("report %+v, want the interrupted prepare", rep)
	}
	if _, err := c.Hold(claimB, dev("gpu-0", "", false), nil); !errors.Is(err, ErrDeviceInUse) {
		t.Fatalf("the reopened record does not hold the interrupted prepare's device: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	// After a reboot the stale entry still holds: what the driver left on
	// the device is undone only by its unprepare.
	c, rep = openT(t, dir, bootTwo)
	defer c.Close()
	if !rep.RebootDetected {
		t.Fatal("reboot not detected")
	}
	if _, err := c.Hold(claimB, dev("gpu-0", "", false), nil); !errors.Is(err, ErrDeviceInUse) {
		t.Fatalf("the stale entry does not hold: %v", err)
	}
	if _, err := c.StartUnprepare(holderA.UID); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(holderA.UID); err != nil {
		t.Fatal(err)
	}
	hb, err := c.Hold(claimB, dev("gpu-0", "", false), nil)
	if err != nil {
		t.Fatalf("after the unprepare: %v", err)
	}
	hb.Release()
	if got := c.Holders(holdDriver, "node-a", "gpu-0"); len(got) != 0 {
		t.Fatalf("holders after everything was released: %v", got)
	}
}

// TestHoldPathsEndingInTheRecord: every way a claim enters and leaves the
// record keeps the device held exactly while it is there.
func TestHoldPathsEndingInTheRecord(t *testing.T) {
	held := func(c *Cache) bool { return len(c.Holders(holdDriver, "node-a", "gpu-0")) > 0 }
	c, _ := openT(t, t.TempDir(), bootOne)
	defer c.Close()

	// RecordPrepared: nothing recorded before the driver, the hold covers it.
	h, err := c.Hold(holderA, dev("gpu-0", "", false), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RecordPrepared(holderA, dev("gpu-0", "", false)); err != nil {
		t.Fatal(err)
	}
	h.Release()
	if !held(c) {
		t.Fatal("RecordPrepared's entry does not hold")
	}
	if err := c.RemovePrepared(holderA.UID); err != nil {
		t.Fatal(err)
	}
	if held(c) {
		t.Fatal("RemovePrepared left the device held")
	}

	// A failed prepare: the hold ends, nothing was recorded.
	h, err = c.Hold(holderA, dev("gpu-0", "", false), nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	if held(c) {
		t.Fatal("a released hold still holds")
	}

	// DropGone forgets the entry, and with it the hold.
	prepareA(t, c, dev("gpu-0", "", false), Prepared)
	if _, err := c.DropGone(func(ClaimRef) (bool, error) { return false, nil }); err != nil {
		t.Fatal(err)
	}
	if held(c) {
		t.Fatal("DropGone left the device held")
	}
}

// TestHoldRebuiltAfterDamage: a claim that damage to the record made
// uncertain holds its devices in the recovered record.
func TestHoldRebuiltAfterDamage(t *testing.T) {
	dir := t.TempDir()
	c, _ := openT(t, dir, bootOne)
	first := ClaimRef{Namespace: "ns", Name: "first", UID: "u0"}
	if _, err := c.RecordPrepared(first, dev("gpu-9", "", false)); err != nil {
		t.Fatal(err)
	}
	prepareA(t, c, dev("gpu-0", "", false), Prepared)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	damageLog(t, dir, `"u0"`) // the first claim's change
	c, rep, err := Open(dir, bootOne, WithJournalOptions(checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(rep.Uncertain) != 1 || rep.Uncertain[0].Claim != holderA {
		t.Fatalf("uncertain %+v, want %v", rep.Uncertain, holderA)
	}
	_, err = c.Hold(claimB, dev("gpu-0", "", false), nil)
	var inUse *DeviceInUseError
	if !errors.As(err, &inUse) || !inUse.HolderUncertain || !strings.Contains(err.Error(), "uncertain") {
		t.Fatalf("Hold after damage: %v, want a refusal naming the uncertain holder", err)
	}
}

// TestHoldConcurrentPrepares: claims racing for one device through Hold
// never have it at the same time, whether they record PrepareStarted
// first or only Prepared afterwards; every claim gets it in the end.
func TestHoldConcurrentPrepares(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	c, _ := openT(t, t.TempDir(), bootOne)
	defer c.Close()
	const claims = 8
	var inDriver atomic.Int32 // claims "in the driver" with the device now
	var wg sync.WaitGroup
	errs := make(chan error, claims)
	for i := range claims {
		stateless := rng.IntN(2) == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref := ClaimRef{Namespace: "ns", Name: fmt.Sprint("c", i), UID: fmt.Sprint("u", i)}
			devs := dev("gpu-0", "", false)
			for {
				h, err := c.Hold(ref, devs, nil)
				if errors.Is(err, ErrDeviceInUse) {
					runtime.Gosched()
					continue // the kubelet's retry
				}
				if err != nil {
					errs <- err
					return
				}
				if !stateless {
					if _, err := c.StartPrepare(ref, ""); err != nil {
						errs <- err
						return
					}
				}
				if n := inDriver.Add(1); n != 1 {
					errs <- fmt.Errorf("claim %s in the driver with %d others", ref.UID, n-1)
				}
				runtime.Gosched() // let the others try while this one has the device
				inDriver.Add(-1)
				if stateless {
					_, err = c.RecordPrepared(ref, devs)
				} else {
					_, err = c.FinishPrepare(ref.UID, devs)
				}
				h.Release()
				if err != nil {
					errs <- err
					return
				}
				if _, err := c.StartUnprepare(ref.UID); err != nil {
					errs <- err
					return
				}
				errs <- c.Remove(ref.UID)
				return
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := c.Holders(holdDriver, "node-a", "gpu-0"); len(got) != 0 || c.Len() != 0 {
		t.Fatalf("holders %v and %d entries left", got, c.Len())
	}
}

// TestHoldsOfOneClaim: a claim may hold devices through several Holds at
// once (a caller without the claim's lock); each release drops its own.
func TestHoldsOfOneClaim(t *testing.T) {
	c, _ := openT(t, t.TempDir(), bootOne)
	defer c.Close()
	var hs []*Hold
	for _, name := range []string{"gpu-0", "gpu-1", "gpu-2"} {
		h, err := c.Hold(holderA, dev(name, "", false), nil)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	for _, i := range []int{1, 0, 2} { // middle, first, last of the claim's list
		hs[i].Release()
		for j, name := range []string{"gpu-0", "gpu-1", "gpu-2"} {
			released := j == i || (i == 0 && j == 1) || i == 2
			if got := len(c.Holders(holdDriver, "node-a", name)); (got == 0) != released {
				t.Fatalf("after releasing hold %d: %s has %d holders", i, name, got)
			}
		}
	}
	e, err := c.StartPrepare(holderA, "")
	if err != nil || len(e.Drivers) != 0 {
		t.Fatalf("StartPrepare after every hold was released: %+v, %v; want no devices", e, err)
	}
}
