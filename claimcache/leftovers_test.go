package claimcache

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestClassifyLeftover(t *testing.T) {
	e := Entry{Claim: ClaimRef{Namespace: "ns", Name: "c", UID: "u1"}, State: Prepared}
	started := Entry{Claim: e.Claim, State: PrepareStarted}
	live := APIClaim{Exists: true, UID: "u1", Reserved: true}
	for _, tc := range []struct {
		name   string
		entry  Entry
		listed bool
		api    APIClaim
		want   LeftoverReason
	}{
		{"listed, claim in use", e, true, live, ""},
		{"listed, claim deleted", e, true, APIClaim{}, ""},
		{"listed, claim recreated", e, true, APIClaim{Exists: true, UID: "u2", Reserved: true}, ""},
		{"listed, claim unreserved", e, true, APIClaim{Exists: true, UID: "u1"}, ""},
		{"listed, prepare interrupted, claim deleted", started, true, APIClaim{}, ""},
		{"not listed, claim in use", e, false, live, ""},
		{"not listed, claim deleted", e, false, APIClaim{}, ReasonClaimDeleted},
		{"not listed, prepare interrupted, claim deleted", started, false, APIClaim{}, ReasonClaimDeleted},
		{"not listed, claim recreated", e, false, APIClaim{Exists: true, UID: "u2", Reserved: true}, ReasonClaimRecreated},
		{"not listed, claim recreated, unreserved", e, false, APIClaim{Exists: true, UID: "u2"}, ReasonClaimRecreated},
		{"not listed, claim unreserved", e, false, APIClaim{Exists: true, UID: "u1"}, ReasonClaimUnreserved},
		{"not listed, prepare interrupted, pod gone", started, false, APIClaim{Exists: true, UID: "u1"}, ReasonClaimUnreserved},
		{"not listed, prepare interrupted, claim in use", started, false, live, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClassifyLeftover(tc.entry, tc.listed, tc.api); got != tc.want {
				t.Errorf("ClassifyLeftover = %q, want %q", got, tc.want)
			}
		})
	}
}

// leftoverWorld is what the kubelet and the API server say, changed by the
// test between sweeps.
type leftoverWorld struct {
	kubelet    map[string]bool
	kubeletErr error
	api        map[string]APIClaim // by namespace/name
	apiErr     map[string]error    // by UID
}

func (w *leftoverWorld) source() LeftoverSource {
	return LeftoverSource{
		Kubelet: func() (map[string]bool, error) { return w.kubelet, w.kubeletErr },
		Lookup: func(r ClaimRef) (APIClaim, error) {
			if err := w.apiErr[r.UID]; err != nil {
				return APIClaim{}, err
			}
			return w.api[r.nameKey()], nil
		},
	}
}

func summary(rep LeftoverReport) string {
	s := ""
	for _, l := range rep.Leftovers {
		s += fmt.Sprintf("%s:%s:due=%v ", l.Entry.Claim.Name, l.Reason, l.Due)
	}
	return fmt.Sprintf("%skept=%d errors=%d", s, rep.Kept, len(rep.Errors))
}

// The grace period runs from the first sweep that saw an entry as a
// leftover, starts again when a sweep does not, and only due leftovers are
// cleaned, each checked again under its lock.
func TestLeftoverTrackerAndClean(t *testing.T) {
	c, _ := openT(t, t.TempDir(), "boot-1")
	defer c.Close()
	refs := map[string]ClaimRef{}
	for _, name := range []string{"deleted", "recreated", "unreserved", "listed", "inuse", "flaky"} {
		ref := ClaimRef{Namespace: "ns", Name: name, UID: "uid-" + name}
		refs[name] = ref
		if _, err := c.StartPrepare(ref, ""); err != nil {
			t.Fatal(err)
		}
		if name == "deleted" {
			continue // left in PrepareStarted, as by a crash
		}
		if _, err := c.FinishPrepare(ref.UID, gpuDevices); err != nil {
			t.Fatal(err)
		}
	}
	w := &leftoverWorld{
		kubelet: map[string]bool{"uid-listed": true, "uid-other-driver": true},
		api: map[string]APIClaim{
			"ns/recreated":  {Exists: true, UID: "uid-new", Reserved: true},
			"ns/unreserved": {Exists: true, UID: "uid-unreserved"},
			"ns/inuse":      {Exists: true, UID: "uid-inuse", Reserved: true},
			// listed is gone from the API server: the kubelet still lists it.
		},
		apiErr: map[string]error{"uid-flaky": errors.New("API server unavailable")},
	}
	var tr LeftoverTracker
	t0 := time.Unix(1000, 0)
	const grace = 10 * time.Second

	steps := []struct {
		at     time.Duration
		change func()
		want   string
	}{
		{0, nil, "deleted:claim-deleted:due=false recreated:claim-recreated:due=false unreserved:claim-unreserved:due=false kept=2 errors=1"},
		{9 * time.Second, nil, "deleted:claim-deleted:due=false recreated:claim-recreated:due=false unreserved:claim-unreserved:due=false kept=2 errors=1"},
		// The kubelet lists "unreserved" again for a while: its grace
		// period starts over.
		{9500 * time.Millisecond, func() { w.kubelet["uid-unreserved"] = true }, "deleted:claim-deleted:due=false recreated:claim-recreated:due=false kept=3 errors=1"},
		{10 * time.Second, func() { delete(w.kubelet, "uid-unreserved") }, "deleted:claim-deleted:due=true recreated:claim-recreated:due=true unreserved:claim-unreserved:due=false kept=2 errors=1"},
		{19 * time.Second, nil, "deleted:claim-deleted:due=true recreated:claim-recreated:due=true unreserved:claim-unreserved:due=false kept=2 errors=1"},
		{20 * time.Second, nil, "deleted:claim-deleted:due=true recreated:claim-recreated:due=true unreserved:claim-unreserved:due=true kept=2 errors=1"},
	}
	var rep LeftoverReport
	for _, s := range steps {
		if s.change != nil {
			s.change()
		}
		var err error
		rep, err = tr.Find(c, w.source(), t0.Add(s.at), grace)
		if err != nil {
			t.Fatal(err)
		}
		if got := summary(rep); got != s.want {
			t.Errorf("at %s:\n got %s\nwant %s", s.at, got, s.want)
		}
	}

	// The kubelet starts preparing "recreated" between Find and the
	// clean: the check under the lock sees it, nothing changes.
	var unprepared []string
	unprepare := func(e Entry) error { unprepared = append(unprepared, e.Claim.Name); return nil }
	stillNotListed := func(e Entry) (bool, error) { return !w.kubelet[e.Claim.UID], nil }
	w.kubelet["uid-recreated"] = true
	for _, l := range rep.Leftovers {
		_, err := c.CleanLeftover(l, stillNotListed, unprepare)
		switch l.Entry.Claim.Name {
		case "recreated":
			if !errors.Is(err, ErrNotLeftover) {
				t.Errorf("clean %s: %v, want ErrNotLeftover", l.Entry.Claim.Name, err)
			}
		default:
			if err != nil {
				t.Errorf("clean %s: %v", l.Entry.Claim.Name, err)
			}
		}
	}
	if want := []string{"deleted", "unreserved"}; !slices.Equal(unprepared, want) {
		t.Errorf("unprepared %v, want %v", unprepared, want)
	}
	var left []string
	for _, e := range c.List() {
		left = append(left, e.Claim.Name)
	}
	if want := []string{"flaky", "inuse", "listed", "recreated"}; !slices.Equal(left, want) {
		t.Errorf("record holds %v, want %v", left, want)
	}
	got, _ := c.Get("uid-recreated")
	if got.State != Prepared {
		t.Errorf("recreated: state %s after a refused clean, want Prepared", got.State)
	}

	// Cleaning an entry that is gone is ErrNotFound; a failed unprepare
	// leaves it in UnprepareStarted for a retry.
	if _, err := c.CleanLeftover(rep.Leftovers[0], stillNotListed, unprepare); !errors.Is(err, ErrNotFound) {
		t.Errorf("clean of a removed entry: %v, want ErrNotFound", err)
	}
	delete(w.kubelet, "uid-recreated")
	boom := errors.New("driver failed")
	if _, err := c.CleanLeftover(Leftover{Entry: Entry{Claim: refs["recreated"]}}, stillNotListed, func(Entry) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("clean with a failing unprepare: %v, want %v", err, boom)
	}
	if got, _ := c.Get("uid-recreated"); got.State != UnprepareStarted {
		t.Errorf("after a failed unprepare: state %s, want UnprepareStarted", got.State)
	}
}

// Without the kubelet's list nothing is reported, so nothing is cleaned.
func TestLeftoversNeedTheKubelet(t *testing.T) {
	c, _ := openT(t, t.TempDir(), "boot-1")
	defer c.Close()
	if _, err := c.StartPrepare(ClaimRef{Namespace: "ns", Name: "a", UID: "u"}, ""); err != nil {
		t.Fatal(err)
	}
	bad := errors.New("checksum mismatch")
	w := &leftoverWorld{kubeletErr: bad}
	var tr LeftoverTracker
	rep, err := tr.Find(c, w.source(), time.Unix(0, 0), 0)
	if !errors.Is(err, bad) || len(rep.Leftovers) != 0 {
		t.Fatalf("Find with an unreadable kubelet checkpoint: %v, %v; want the error and no leftovers", summary(rep), err)
	}
}
