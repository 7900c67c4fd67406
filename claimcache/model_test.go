package claimcache

import (
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

var (
	modelSeeds = flag.Int("claimcache.seeds", 40, "number of random seeds TestModel runs")
	modelSteps = flag.Int("claimcache.steps", 150, "operations per seed in TestModel")
	modelSeed  = flag.Uint64("claimcache.seed", 0, "run TestModel with this one seed only (to replay a failure)")
)

// model is the plain in-memory statement of what a Cache must do: a map of
// claims and a boot ID, with every rule written out once more, independently
// of the implementation.
type model struct {
	boot   string
	claims map[string]modelClaim // by UID
}

type modelClaim struct {
	ref     ClaimRef
	state   State
	boot    string
	pods    map[string]bool
	drivers map[string][]Device
}

func (m *model) entry(c modelClaim) Entry {
	e := Entry{Claim: c.ref, State: c.state, BootID: c.boot, Stale: c.boot != m.boot, Drivers: cloneDrivers(c.drivers)}
	if len(c.pods) > 0 {
		e.PodUIDs = slices.Sorted(maps.Keys(c.pods))
	}
	return e
}

func (m *model) list() []Entry {
	out := []Entry{}
	for _, c := range m.claims {
		out = append(out, m.entry(c))
	}
	sortEntries(out)
	return out
}

func (m *model) owner(ns, name string) (string, bool) {
	for uid, c := range m.claims {
		if c.ref.Namespace == ns && c.ref.Name == name {
			return uid, true
		}
	}
	return "", false
}

func (m *model) illegal(uid string, c modelClaim, op Op) string {
	return fmt.Sprintf("illegal %s from %s stale=%v", op, c.state, c.boot != m.boot)
}

// Each model operation returns what the Cache must return: an entry (or
// none) and errKind of the error.

func (m *model) startPrepare(ref ClaimRef, pod string) (*Entry, string) {
	if owner, ok := m.owner(ref.Namespace, ref.Name); ok && owner != ref.UID {
		return nil, fmt.Sprintf("uid mismatch %s/%s recorded %s requested %s", ref.Namespace, ref.Name, owner, ref.UID)
	}
	c, ok := m.claims[ref.UID]
	if !ok {
		c = modelClaim{ref: ref, pods: map[string]bool{}}
	} else if c.ref != ref {
		return nil, "invalid"
	} else if !(c.state == PrepareStarted || c.state == Prepared && c.boot != m.boot) {
		return nil, m.illegal(ref.UID, c, OpStartPrepare)
	}
	c.state, c.boot = PrepareStarted, m.boot
	c.pods = maps.Clone(c.pods)
	if pod != "" {
		c.pods[pod] = true
	}
	m.claims[ref.UID] = c
	e := m.entry(c)
	return &e, "ok"
}

func (m *model) finishPrepare(uid string, drivers map[string][]Device) (*Entry, string) {
	c, ok := m.claims[uid]
	switch {
	case !ok:
		return nil, "not found"
	case c.state != PrepareStarted || c.boot != m.boot:
		return nil, m.illegal(uid, c, OpFinishPrepare)
	}
	c.state = Prepared
	c.drivers = cloneDrivers(drivers)
	if len(c.drivers) == 0 {
		c.drivers = nil
	}
	m.claims[uid] = c
	e := m.entry(c)
	return &e, "ok"
}

func (m *model) startUnprepare(uid string) (*Entry, string) {
	c, ok := m.claims[uid]
	if !ok {
		return nil, "not found"
	}
	c.state = UnprepareStarted
	m.claims[uid] = c
	e := m.entry(c)
	return &e, "ok"
}

// remove drops a claim in state from, as Remove (UnprepareStarted) and
// RemovePrepared (Prepared) do.
func (m *model) remove(uid string, op Op, from State) (*Entry, string) {
	c, ok := m.claims[uid]
	switch {
	case !ok:
		return nil, "not found"
	case c.state != from:
		return nil, m.illegal(uid, c, op)
	}
	delete(m.claims, uid)
	return nil, "ok"
}

func (m *model) recordPrepared(ref ClaimRef, drivers map[string][]Device) (*Entry, string) {
	if owner, ok := m.owner(ref.Namespace, ref.Name); ok && owner != ref.UID {
		return nil, fmt.Sprintf("uid mismatch %s/%s recorded %s requested %s", ref.Namespace, ref.Name, owner, ref.UID)
	}
	if c, ok := m.claims[ref.UID]; ok {
		if c.ref != ref {
			return nil, "invalid"
		}
		return nil, m.illegal(ref.UID, c, OpRecordPrepared)
	}
	c := modelClaim{ref: ref, state: Prepared, boot: m.boot, pods: map[string]bool{}, drivers: cloneDrivers(drivers)}
	if len(c.drivers) == 0 {
		c.drivers = nil
	}
	m.claims[ref.UID] = c
	e := m.entry(c)
	return &e, "ok"
}

func (m *model) setPod(uid, pod string, add bool) (*Entry, string) {
	c, ok := m.claims[uid]
	switch {
	case !ok:
		return nil, "not found"
	case add && c.state == UnprepareStarted:
		return nil, m.illegal(uid, c, OpAddPod)
	}
	c.pods = maps.Clone(c.pods)
	if add {
		c.pods[pod] = true
	} else {
		delete(c.pods, pod)
	}
	m.claims[uid] = c
	e := m.entry(c)
	return &e, "ok"
}

func (m *model) lookup(ref ClaimRef) (*Entry, string) {
	c, ok := m.claims[ref.UID]
	if ok && c.ref != ref {
		return nil, "invalid"
	}
	if ok {
		e := m.entry(c)
		return &e, "ok"
	}
	if owner, named := m.owner(ref.Namespace, ref.Name); named {
		return nil, fmt.Sprintf("uid mismatch %s/%s recorded %s requested %s", ref.Namespace, ref.Name, owner, ref.UID)
	}
	return nil, "not found"
}

func (m *model) report() *RestoreReport {
	r := &RestoreReport{Entries: len(m.claims)}
	for _, e := range m.list() {
		if e.Stale {
			r.RebootDetected = true
		}
		switch {
		case e.State == PrepareStarted || e.State == UnprepareStarted:
			r.Interrupted = append(r.Interrupted, e)
		case e.Stale:
			r.NoLongerPrepared = append(r.NoLongerPrepared, e)
		}
	}
	return r
}

// TestModel runs random operations, crashes, restarts and reboots against a
// Cache and the model, and requires the same answer from both every time.
func TestModel(t *testing.T) {
	seeds := *modelSeeds
	if testing.Short() {
		seeds = 5
	}
	first := uint64(1)
	if *modelSeed != 0 {
		first, seeds = *modelSeed, 1
	}
	for seed := first; seed < first+uint64(seeds); seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			runModel(t, seed, *modelSteps)
		})
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0x636c61696d))
	dir := t.TempDir()
	bootN := 1
	bootName := func() string { return fmt.Sprintf("boot-%d", bootN) }
	m := &model{boot: bootName(), claims: map[string]modelClaim{}}
	c, _ := openT(t, dir, m.boot)
	defer func() { c.Close() }()

	// Six UIDs share three names, so recreated claims (same name, new UID)
	// happen often; a few calls use a wrong name for a UID.
	names := []string{"alpha", "beta", "gamma"}
	uids := []string{"u0", "u1", "u2", "u3", "u4", "u5"}
	pods := []string{"", "p0", "p1", "p2"}
	pickRef := func() ClaimRef {
		i := rng.IntN(len(uids))
		name := names[i%len(names)]
		if rng.IntN(10) == 0 {
			name = names[rng.IntN(len(names))]
		}
		return ClaimRef{Namespace: "ns", Name: name, UID: uids[i]}
	}
	pickUID := func() string { return uids[rng.IntN(len(uids))] }
	pickDrivers := func() map[string][]Device {
		out := map[string][]Device{}
		for _, drv := range []string{"a.example.com", "b.example.com"} {
			for range rng.IntN(3) {
				n := rng.IntN(100)
				d := Device{Pool: "pool", Device: fmt.Sprint("dev", n), CDIDeviceIDs: []string{fmt.Sprintf("example.com/dev=%d", n)}}
				if rng.IntN(2) == 0 {
					d.Requests = []string{"r"}
					d.ShareID = fmt.Sprint("share-", n)
				}
				out[drv] = append(out[drv], d)
			}
		}
		return out
	}

	var trace []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d (replay: go test -run 'TestModel' -claimcache.seed=%d), after:\n  %s\n%s",
			seed, seed, strings.Join(trace, "\n  "), fmt.Sprintf(format, args...))
	}
	compare := func(what string, got Entry, gotErr error, want *Entry, wantKind string) {
		t.Helper()
		if kind := errKind(gotErr); kind != wantKind {
			fail("%s: error %q (%v), model says %q", what, kind, gotErr, wantKind)
		}
		if want != nil && !reflect.DeepEqual(got, *want) {
			fail("%s: entry\n got %+v\nwant %+v", what, got, *want)
		}
	}
	reopen := func(how string, newBoot bool) {
		t.Helper()
		if how == "crash" {
			crash(t, c)
		} else if err := c.Close(); err != nil {
			fail("Close: %v", err)
		}
		if newBoot {
			bootN++
			m.boot = bootName()
		}
		var rep *RestoreReport
		c, rep = openT(t, dir, m.boot)
		if want := m.report(); !reflect.DeepEqual(rep, want) {
			fail("restore report after %s:\n got %+v\nwant %+v", how, rep, want)
		}
	}

	for range steps {
		switch op := rng.IntN(100); {
		case op < 20:
			ref, pod := pickRef(), pods[rng.IntN(len(pods))]
			trace = append(trace, fmt.Sprintf("StartPrepare(%v, %q)", ref, pod))
			got, err := c.StartPrepare(ref, pod)
			want, kind := m.startPrepare(ref, pod)
			compare("StartPrepare", got, err, want, kind)
		case op < 35:
			uid, drivers := pickUID(), pickDrivers()
			trace = append(trace, fmt.Sprintf("FinishPrepare(%s, %d drivers)", uid, len(drivers)))
			got, err := c.FinishPrepare(uid, drivers)
			want, kind := m.finishPrepare(uid, drivers)
			compare("FinishPrepare", got, err, want, kind)
		case op < 47:
			uid := pickUID()
			trace = append(trace, fmt.Sprintf("StartUnprepare(%s)", uid))
			got, err := c.StartUnprepare(uid)
			want, kind := m.startUnprepare(uid)
			compare("StartUnprepare", got, err, want, kind)
		case op < 52:
			uid := pickUID()
			trace = append(trace, fmt.Sprintf("Remove(%s)", uid))
			err := c.Remove(uid)
			want, kind := m.remove(uid, OpRemove, UnprepareStarted)
			compare("Remove", Entry{}, err, want, kind)
		case op < 55:
			ref, drivers := pickRef(), pickDrivers()
			trace = append(trace, fmt.Sprintf("RecordPrepared(%v, %d drivers)", ref, len(drivers)))
			got, err := c.RecordPrepared(ref, drivers)
			want, kind := m.recordPrepared(ref, drivers)
			compare("RecordPrepared", got, err, want, kind)
		case op < 57:
			uid := pickUID()
			trace = append(trace, fmt.Sprintf("RemovePrepared(%s)", uid))
			err := c.RemovePrepared(uid)
			want, kind := m.remove(uid, OpRemovePrepared, Prepared)
			compare("RemovePrepared", Entry{}, err, want, kind)
		case op < 67:
			uid, pod, add := pickUID(), pods[1+rng.IntN(len(pods)-1)], rng.IntN(2) == 0
			trace = append(trace, fmt.Sprintf("SetPod(%s, %s, add=%v)", uid, pod, add))
			var got Entry
			var err error
			if add {
				got, err = c.AddPod(uid, pod)
			} else {
				got, err = c.RemovePod(uid, pod)
			}
			want, kind := m.setPod(uid, pod, add)
			compare("AddPod/RemovePod", got, err, want, kind)
		case op < 75:
			ref := pickRef()
			trace = append(trace, fmt.Sprintf("Lookup(%v)", ref))
			got, err := c.Lookup(ref)
			want, kind := m.lookup(ref)
			compare("Lookup", got, err, want, kind)
			name := names[rng.IntN(len(names))]
			got, err = c.LookupName("ns", name)
			want, kind = nil, "not found"
			if owner, ok := m.owner("ns", name); ok {
				e := m.entry(m.claims[owner])
				want, kind = &e, "ok"
			}
			compare("LookupName", got, err, want, kind)
		case op < 82:
			existing := map[string]bool{}
			for _, u := range uids {
				existing[u] = rng.IntN(2) == 0
			}
			drop := rng.IntN(2) == 0
			trace = append(trace, fmt.Sprintf("GC(existing=%v, drop=%v)", existing, drop))
			exists := func(r ClaimRef) (bool, error) { return existing[r.UID], nil }
			var got []Entry
			var err error
			if drop {
				got, err = c.DropGone(exists)
			} else {
				got, err = c.Gone(exists)
			}
			if err != nil {
				fail("GC: %v", err)
			}
			var want []Entry
			for _, e := range m.list() {
				if !existing[e.Claim.UID] {
					want = append(want, e)
					if drop {
						delete(m.claims, e.Claim.UID)
					}
				}
			}
			if len(got) != 0 || len(want) != 0 {
				if !reflect.DeepEqual(got, want) {
					fail("GC:\n got %+v\nwant %+v", got, want)
				}
			}
		case op < 90:
			trace = append(trace, "crash")
			reopen("crash", false)
		case op < 94:
			trace = append(trace, "reboot")
			reopen("crash", true)
		default:
			trace = append(trace, "restart")
			reopen("close", false)
		}
		if got, want := c.List(), m.list(); !reflect.DeepEqual(got, want) && (len(got) != 0 || len(want) != 0) {
			fail("List:\n got %+v\nwant %+v", got, want)
		}
		if n := c.claimLocks.held(); n != 0 {
			fail("%d claim locks still allocated with no operation running", n)
		}
	}
}
