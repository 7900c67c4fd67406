package claimcache

import (
	"errors"
	"math/big"
	"slices"
	"strings"
	"testing"
)

// partitioned publishes, in holdDriver's pool node-a, a GPU of 40 units of
// memory as pgpu-0 (counter set pgpu-0, the whole of it) and as four
// partitions pgpu-0-part-N of 10 each; sgpu-0 with allowMultipleAllocations,
// consuming all of counter set sgpu-0; and gpu-0, which consumes no
// counters. The devices named in unlisted are not listed.
func partitioned(unlisted ...string) Published {
	return func(driver, pool, device string) PublishedDevice {
		if driver != holdDriver || pool != "node-a" || slices.Contains(unlisted, device) {
			return PublishedDevice{}
		}
		consumes := func(set string, amount int64) PublishedDevice {
			return PublishedDevice{Listed: true, AllowMultipleAllocations: set == "sgpu-0",
				ConsumesCounters: CounterAmounts{set: {"memory": big.NewRat(amount, 1)}},
				CounterValues:    CounterAmounts{set: {"memory": big.NewRat(40, 1)}}}
		}
		switch {
		case device == "pgpu-0", device == "sgpu-0":
			return consumes(device, 40)
		case strings.HasPrefix(device, "pgpu-0-part-"):
			return consumes("pgpu-0", 10)
		}
		return PublishedDevice{Listed: true}
	}
}

// devices is holdDriver's devices of pool node-a by name; a name may end in
// "/admin" (admin access) or "/share-N" (a share ID).
func devices(names ...string) map[string][]Device {
	var out []Device
	for _, n := range names {
		name, suffix, _ := strings.Cut(n, "/")
		d := Device{Pool: "node-a", Device: name, Requests: []string{"gpu"}, AdminAccess: suffix == "admin"}
		if strings.HasPrefix(suffix, "share-") {
			d.ShareID = suffix
		}
		out = append(out, d)
	}
	return map[string][]Device{holdDriver: out}
}

// TestHoldCounters: devices of different names that consume the same
// counters (a whole GPU and its partitions) are held together only while
// their counters fit the published values.
func TestHoldCounters(t *testing.T) {
	for _, tc := range []struct {
		name string
		held []string // holderA's devices, prepared through Hold with heldPublished
		// inFlight: holderA only holds them (Hold), nothing is recorded.
		inFlight bool
		// reopen: the record is closed and opened again before claim asks.
		reopen    bool
		published Published // what claim's Hold is told
		claim     ClaimRef
		devs      []string
		// wantDevice and wantHolderDevice are the refusal's devices, ""
		// for no refusal.
		wantDevice, wantHolderDevice string
	}{
		{name: "partitions side by side", held: []string{"pgpu-0-part-0"}, published: partitioned(),
			claim: claimB, devs: []string{"pgpu-0-part-1"}},
		{name: "partitions filling the GPU exactly", held: []string{"pgpu-0-part-0", "pgpu-0-part-1"}, published: partitioned(),
			claim: claimB, devs: []string{"pgpu-0-part-2", "pgpu-0-part-3"}},
		{name: "a partition beside the whole", held: []string{"pgpu-0"}, published: partitioned(),
			claim: claimB, devs: []string{"pgpu-0-part-1"}, wantDevice: "pgpu-0-part-1", wantHolderDevice: "pgpu-0"},
		{name: "the whole beside a partition", held: []string{"pgpu-0-part-2"}, published: partitioned(),
			claim: claimB, devs: []string{"gpu-0", "pgpu-0"}, wantDevice: "pgpu-0", wantHolderDevice: "pgpu-0-part-2"},
		{name: "the last of the claim's partitions past what is left", held: []string{"pgpu-0-part-0", "pgpu-0-part-1", "pgpu-0-part-2"}, published: partitioned(),
			claim: claimB, devs: []string{"pgpu-0-part-3", "pgpu-0"}, wantDevice: "pgpu-0", wantHolderDevice: "pgpu-0-part-0"},
		{name: "a partition beside the whole held in flight", held: []string{"pgpu-0"}, inFlight: true, published: partitioned(),
			claim: claimB, devs: []string{"pgpu-0-part-0"}, wantDevice: "pgpu-0-part-0", wantHolderDevice: "pgpu-0"},
		{name: "admin access to a partition beside the whole", held: []string{"pgpu-0"}, published: partitioned(),
			claim: claimB, devs: []string{"pgpu-0-part-1/admin"}},
		{name: "a partition beside admin access to the whole", held: []string{"pgpu-0/admin"}, published: partitioned(),
			claim: claimB, devs: []string{"pgpu-0-part-1"}},
		{name: "the same claim again", held: []string{"pgpu-0"}, published: partitioned(),
			claim: holderA, devs: []string{"pgpu-0-part-1"}},
		{name: "shares of a counter-consuming device count it once", held: []string{"sgpu-0/share-1"}, published: partitioned(),
			claim: claimB, devs: []string{"sgpu-0/share-2"}},
		{name: "after a reopen", held: []string{"pgpu-0"}, reopen: true, published: partitioned(),
			claim: claimB, devs: []string{"pgpu-0-part-3"}, wantDevice: "pgpu-0-part-3", wantHolderDevice: "pgpu-0"},
		{name: "the whole no longer listed counts as last published", held: []string{"pgpu-0"}, published: partitioned("pgpu-0"),
			claim: claimB, devs: []string{"pgpu-0-part-3"}, wantDevice: "pgpu-0-part-3", wantHolderDevice: "pgpu-0"},
		{name: "the whole no longer listed after a reopen counts nothing", held: []string{"pgpu-0"}, reopen: true, published: partitioned("pgpu-0"),
			claim: claimB, devs: []string{"pgpu-0-part-3"}},
		{name: "a partition no longer listed is not checked", held: []string{"pgpu-0"}, published: partitioned("pgpu-0-part-3"),
			claim: claimB, devs: []string{"pgpu-0-part-3"}},
		{name: "without Published nothing is counted", held: []string{"pgpu-0"},
			claim: claimB, devs: []string{"pgpu-0-part-3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c, _ := openT(t, dir, bootOne)
			h, err := c.Hold(holderA, devices(tc.held...), partitioned())
			if err != nil {
				t.Fatal(err)
			}
			if !tc.inFlight {
				if _, err := c.RecordPrepared(holderA, devices(tc.held...)); err != nil {
					t.Fatal(err)
				}
				h.Release()
			}
			if tc.reopen {
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				c, _ = openT(t, dir, bootOne)
			}
			defer c.Close()
			hb, err := c.Hold(tc.claim, devices(tc.devs...), tc.published)
			if tc.wantDevice == "" {
				if err != nil {
					t.Fatalf("Hold: %v, want no conflict", err)
				}
				hb.Release()
				return
			}
			var inUse *DeviceInUseError
			if !errors.As(err, &inUse) || !errors.Is(err, ErrDeviceInUse) {
				t.Fatalf("Hold: %v, want a *DeviceInUseError", err)
			}
			wantState := Prepared
			if tc.inFlight {
				wantState = ""
			}
			if inUse.Device != tc.wantDevice || inUse.HolderDevice != tc.wantHolderDevice || inUse.Holder != holderA || inUse.Claim != tc.claim ||
				inUse.HolderState != wantState || inUse.CounterSet != "pgpu-0" || inUse.Counter != "memory" {
				t.Errorf("refusal %+v, want %s refused for counter memory of pgpu-0 beside %s of %v (%q)", inUse, tc.wantDevice, tc.wantHolderDevice, holderA, wantState)
			}
			want := "device gpu.example.com/node-a/" + tc.wantDevice + " (with device " + tc.wantHolderDevice + " it exceeds counter memory of counter set pgpu-0) is in use by claim team-a/old (uid uid-a, "
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message %q\ndoes not say %q", err, want)
			}
			for _, d := range tc.devs {
				if got := c.Holders(holdDriver, "node-a", strings.Split(d, "/")[0]); slices.Contains(got, tc.claim) {
					t.Errorf("the refused claim holds %s", d)
				}
			}
		})
	}
}

// TestHoldCountersReleased: once the claim that holds the whole GPU is
// unprepared, its partitions are held by others side by side.
func TestHoldCountersReleased(t *testing.T) {
	c, _ := openT(t, t.TempDir(), bootOne)
	defer c.Close()
	prepareWith(t, c, holderA, devices("pgpu-0"), partitioned())
	if _, err := c.Hold(claimB, devices("pgpu-0-part-0"), partitioned()); !errors.Is(err, ErrDeviceInUse) {
		t.Fatalf("a partition beside the whole: %v", err)
	}
	if _, err := c.StartUnprepare(holderA.UID); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(holderA.UID); err != nil {
		t.Fatal(err)
	}
	prepareWith(t, c, claimB, devices("pgpu-0-part-0"), partitioned())
	third := ClaimRef{Namespace: "team-c", Name: "third", UID: "uid-c"}
	prepareWith(t, c, third, devices("pgpu-0-part-1"), partitioned())
	if _, err := c.Hold(holderA, devices("pgpu-0"), partitioned()); !errors.Is(err, ErrDeviceInUse) {
		t.Fatalf("the whole beside two partitions: %v", err)
	}
}

// prepareWith prepares ref's devs through Hold and RecordPrepared.
func prepareWith(t *testing.T, c *Cache, ref ClaimRef, devs map[string][]Device, published Published) {
	t.Helper()
	h, err := c.Hold(ref, devs, published)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if _, err := c.RecordPrepared(ref, devs); err != nil {
		t.Fatal(err)
	}
}
