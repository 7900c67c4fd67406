package claimcache

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dranode/dranode/checkpoint"
)

const (
	bootOne = "boot-1111"
	bootTwo = "boot-2222"
)

var claimA = ClaimRef{Namespace: "ns", Name: "claim-a", UID: "uid-a"}

// setupState brings claimA to the named starting condition in dir, recorded
// in bootOne; "stale" conditions are then reopened in bootTwo.
func setupState(t *testing.T, dir, cond string) *Cache {
	t.Helper()
	c, _ := openT(t, dir, bootOne)
	steps := map[string][]string{
		"none": nil,
		"PS":   {"start"},
		"P":    {"start", "finish"},
		"US":   {"start", "finish", "unprepare"},
	}
	base := strings.TrimSuffix(cond, "-stale")
	for _, s := range steps[base] {
		var err error
		switch s {
		case "start":
			_, err = c.StartPrepare(claimA, "pod-1")
		case "finish":
			_, err = c.FinishPrepare(claimA.UID, gpuDevices)
		case "unprepare":
			_, err = c.StartUnprepare(claimA.UID)
		}
		if err != nil {
			t.Fatalf("setup %s: %s: %v", cond, s, err)
		}
	}
	if strings.HasSuffix(cond, "-stale") {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		c, _ = openT(t, dir, bootTwo)
	}
	return c
}

func TestTransitions(t *testing.T) {
	type op struct {
		name string
		run  func(c *Cache) error
	}
	ops := map[Op]op{
		OpStartPrepare:   {run: func(c *Cache) error { _, err := c.StartPrepare(claimA, "pod-2"); return err }},
		OpFinishPrepare:  {run: func(c *Cache) error { _, err := c.FinishPrepare(claimA.UID, gpuDevices); return err }},
		OpStartUnprepare: {run: func(c *Cache) error { _, err := c.StartUnprepare(claimA.UID); return err }},
		OpRemove:         {run: func(c *Cache) error { return c.Remove(claimA.UID) }},
		OpAddPod:         {run: func(c *Cache) error { _, err := c.AddPod(claimA.UID, "pod-2"); return err }},
		OpRemovePod:      {run: func(c *Cache) error { _, err := c.RemovePod(claimA.UID, "pod-1"); return err }},
		OpRecordPrepared: {run: func(c *Cache) error { _, err := c.RecordPrepared(claimA, gpuDevices); return err }},
		OpRemovePrepared: {run: func(c *Cache) error { return c.RemovePrepared(claimA.UID) }},
	}
	// want is the state after the operation ("removed", "none" for no
	// entry, "PS-stale" when the entry stays in an earlier boot) or the error
	// kind as errKind prints it.
	tests := []struct {
		from, op, want string
	}{
		{"none", "StartPrepare", "PS"},
		{"none", "FinishPrepare", "not found"},
		{"none", "StartUnprepare", "not found"},
		{"none", "Remove", "not found"},
		{"none", "AddPod", "not found"},
		{"none", "RemovePod", "not found"},
		{"none", "RecordPrepared", "P"},
		{"none", "RemovePrepared", "not found"},

		{"PS", "StartPrepare", "PS"},
		{"PS", "FinishPrepare", "P"},
		{"PS", "StartUnprepare", "US"},
		{"PS", "Remove", "illegal Remove from PrepareStarted stale=false"},
		{"PS", "AddPod", "PS"},
		{"PS", "RemovePod", "PS"},
		{"PS", "RecordPrepared", "illegal RecordPrepared from PrepareStarted stale=false"},
		{"PS", "RemovePrepared", "illegal RemovePrepared from PrepareStarted stale=false"},

		{"P", "StartPrepare", "illegal StartPrepare from Prepared stale=false"},
		{"P", "FinishPrepare", "illegal FinishPrepare from Prepared stale=false"},
		{"P", "StartUnprepare", "US"},
		{"P", "Remove", "illegal Remove from Prepared stale=false"},
		{"P", "AddPod", "P"},
		{"P", "RemovePod", "P"},
		{"P", "RecordPrepared", "illegal RecordPrepared from Prepared stale=false"},
		{"P", "RemovePrepared", "removed"},

		{"US", "StartPrepare", "illegal StartPrepare from UnprepareStarted stale=false"},
		{"US", "FinishPrepare", "illegal FinishPrepare from UnprepareStarted stale=false"},
		{"US", "StartUnprepare", "US"},
		{"US", "Remove", "removed"},
		{"US", "AddPod", "illegal AddPod from UnprepareStarted stale=false"},
		{"US", "RemovePod", "US"},
		{"US", "RecordPrepared", "illegal RecordPrepared from UnprepareStarted stale=false"},
		{"US", "RemovePrepared", "illegal RemovePrepared from UnprepareStarted stale=false"},

		{"PS-stale", "StartPrepare", "PS"},
		{"PS-stale", "FinishPrepare", "illegal FinishPrepare from PrepareStarted stale=true"},
		{"PS-stale", "StartUnprepare", "US-stale"},
		{"PS-stale", "Remove", "illegal Remove from PrepareStarted stale=true"},
		{"PS-stale", "AddPod", "PS-stale"},
		{"PS-stale", "RemovePod", "PS-stale"},
		{"PS-stale", "RecordPrepared", "illegal RecordPrepared from PrepareStarted stale=true"},
		{"PS-stale", "RemovePrepared", "illegal RemovePrepared from PrepareStarted stale=true"},

		{"P-stale", "StartPrepare", "PS"},
		{"P-stale", "FinishPrepare", "illegal FinishPrepare from Prepared stale=true"},
		{"P-stale", "StartUnprepare", "US-stale"},
		{"P-stale", "Remove", "illegal Remove from Prepared stale=true"},
		{"P-stale", "AddPod", "P-stale"},
		{"P-stale", "RemovePod", "P-stale"},
		{"P-stale", "RecordPrepared", "illegal RecordPrepared from Prepared stale=true"},
		{"P-stale", "RemovePrepared", "removed"},

		{"US-stale", "StartPrepare", "illegal StartPrepare from UnprepareStarted stale=true"},
		{"US-stale", "FinishPrepare", "illegal FinishPrepare from UnprepareStarted stale=true"},
		{"US-stale", "StartUnprepare", "US-stale"},
		{"US-stale", "Remove", "removed"},
		{"US-stale", "AddPod", "illegal AddPod from UnprepareStarted stale=true"},
		{"US-stale", "RemovePod", "US-stale"},
		{"US-stale", "RecordPrepared", "illegal RecordPrepared from UnprepareStarted stale=true"},
		{"US-stale", "RemovePrepared", "illegal RemovePrepared from UnprepareStarted stale=true"},
	}
	short := map[State]string{PrepareStarted: "PS", Prepared: "P", UnprepareStarted: "US"}
	describe := func(c *Cache) string {
		e, err := c.Get(claimA.UID)
		if errors.Is(err, ErrNotFound) {
			return "none"
		}
		if err != nil {
			return "Get: " + err.Error()
		}
		s := short[e.State]
		if e.Stale {
			s += "-stale"
		}
		return s
	}
	for _, tc := range tests {
		t.Run(tc.from+"/"+tc.op, func(t *testing.T) {
			dir := t.TempDir()
			c := setupState(t, dir, tc.from)
			before, _ := c.Get(claimA.UID)
			err := ops[Op(tc.op)].run(c)
			got := errKind(err)
			if err == nil {
				got = describe(c)
				if got == "none" && tc.from != "none" {
					got = "removed"
				}
			}
			if got != tc.want {
				t.Fatalf("%s from %s: got %s, want %s (err: %v)", tc.op, tc.from, got, tc.want, err)
			}
			if err != nil {
				// A refused operation changes nothing, and says what was refused.
				if after, _ := c.Get(claimA.UID); !reflect.DeepEqual(before, after) {
					t.Errorf("refused %s changed the entry:\nbefore %+v\nafter  %+v", tc.op, before, after)
				}
				if errors.Is(err, ErrIllegalTransition) && (!strings.Contains(err.Error(), tc.op) || !strings.Contains(err.Error(), claimA.UID)) {
					t.Errorf("error %q does not name the operation and the claim", err)
				}
			}
			// Whatever the operation did is durable: a reopen shows the same.
			inMemory := c.List()
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			boot := bootOne
			if strings.HasSuffix(tc.from, "-stale") {
				boot = bootTwo
			}
			c2, _ := openT(t, dir, boot)
			defer c2.Close()
			if restored := c2.List(); !reflect.DeepEqual(inMemory, restored) {
				t.Errorf("after reopen:\n got %+v\nwant %+v", restored, inMemory)
			}
		})
	}
}

func TestPrepareFlowKeepsDevicesAndPods(t *testing.T) {
	dir := t.TempDir()
	c, _ := openT(t, dir, bootOne)
	defer c.Close()
	if _, err := c.StartPrepare(claimA, "pod-1"); err != nil {
		t.Fatal(err)
	}
	e, err := c.FinishPrepare(claimA.UID, gpuDevices)
	if err != nil {
		t.Fatal(err)
	}
	if !e.PreparedInCurrentBoot() {
		t.Fatalf("after FinishPrepare: %+v not prepared", e)
	}
	if got, want := e.CDIDeviceIDs("nic.example.com"), []string{"example.com/nic=eth1", "example.com/nic=common"}; !slices.Equal(got, want) {
		t.Errorf("CDI IDs: got %v, want %v", got, want)
	}
	if !reflect.DeepEqual(e.Drivers, gpuDevices) {
		t.Errorf("drivers: got %+v, want %+v", e.Drivers, gpuDevices)
	}
	// Entries are copies: changing one changes nothing recorded.
	e.Drivers["gpu.example.com"][0].CDIDeviceIDs[0] = "mutated"
	e.PodUIDs = append(e.PodUIDs, "mutated")
	again, _ := c.Get(claimA.UID)
	if again.Drivers["gpu.example.com"][0].CDIDeviceIDs[0] != "example.com/gpu=gpu-0" || slices.Contains(again.PodUIDs, "mutated") {
		t.Fatalf("caller's change leaked into the cache: %+v", again)
	}
	// So is the map passed in.
	in := map[string][]Device{"d": {{Pool: "p", Device: "x", CDIDeviceIDs: []string{"v.com/c=x"}}}}
	if _, err := c.StartPrepare(ClaimRef{Namespace: "ns", Name: "b", UID: "uid-b"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FinishPrepare("uid-b", in); err != nil {
		t.Fatal(err)
	}
	in["d"][0].Device = "mutated"
	if b, _ := c.Get("uid-b"); b.Drivers["d"][0].Device != "x" {
		t.Fatalf("FinishPrepare kept the caller's slice: %+v", b)
	}

	for _, pod := range []string{"pod-3", "pod-2", "pod-3"} {
		if _, err := c.AddPod(claimA.UID, pod); err != nil {
			t.Fatal(err)
		}
	}
	e, _ = c.Get(claimA.UID)
	if want := []string{"pod-1", "pod-2", "pod-3"}; !slices.Equal(e.PodUIDs, want) {
		t.Fatalf("pods: got %v, want %v", e.PodUIDs, want)
	}
	for _, pod := range []string{"pod-1", "pod-2", "pod-3"} {
		if e, err = c.RemovePod(claimA.UID, pod); err != nil {
			t.Fatal(err)
		}
	}
	if len(e.PodUIDs) != 0 || e.State != Prepared {
		t.Fatalf("after removing every pod: %+v", e)
	}
	// Unprepare hands back exactly what was prepared.
	e, err = c.StartUnprepare(claimA.UID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(e.Drivers, gpuDevices) {
		t.Fatalf("StartUnprepare returned drivers %+v, want %+v", e.Drivers, gpuDevices)
	}
	if err := c.Remove(claimA.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(claimA.UID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Remove: %v, want ErrNotFound", err)
	}
}

func TestRebootKeepsDevicesAndPreparesAgain(t *testing.T) {
	dir := t.TempDir()
	c, rep := openT(t, dir, bootOne)
	if rep.Entries != 0 || rep.RebootDetected {
		t.Fatalf("fresh directory report: %+v", rep)
	}
	claimB := ClaimRef{Namespace: "ns", Name: "claim-b", UID: "uid-b"}
	claimC := ClaimRef{Namespace: "ns", Name: "claim-c", UID: "uid-c"}
	for _, step := range []func() error{
		func() error { _, err := c.StartPrepare(claimA, "pod-1"); return err },
		func() error { _, err := c.FinishPrepare(claimA.UID, gpuDevices); return err },
		func() error { _, err := c.StartPrepare(claimB, "pod-1"); return err },
		func() error { _, err := c.StartPrepare(claimC, "pod-2"); return err },
		func() error { _, err := c.FinishPrepare(claimC.UID, nil); return err },
		func() error { _, err := c.StartUnprepare(claimC.UID); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	crash(t, c)

	// Restart in the same boot: two interrupted entries, nothing stale.
	c, rep = openT(t, dir, bootOne)
	if rep.Entries != 3 || rep.RebootDetected || len(rep.NoLongerPrepared) != 0 {
		t.Fatalf("restart report: %+v", rep)
	}
	if got := []string{rep.Interrupted[0].Claim.UID, rep.Interrupted[1].Claim.UID}; !slices.Equal(got, []string{"uid-b", "uid-c"}) || len(rep.Interrupted) != 2 {
		t.Fatalf("interrupted: %+v", rep.Interrupted)
	}
	if e, _ := c.Get(claimA.UID); !e.PreparedInCurrentBoot() {
		t.Fatalf("claim A after restart: %+v", e)
	}
	crash(t, c)

	// Reboot: A no longer prepared but keeps its devices.
	c, rep = openT(t, dir, bootTwo)
	defer c.Close()
	if !rep.RebootDetected || rep.Entries != 3 || len(rep.NoLongerPrepared) != 1 || len(rep.Interrupted) != 2 {
		t.Fatalf("reboot report: %+v", rep)
	}
	a := rep.NoLongerPrepared[0]
	if a.Claim != claimA || a.PreparedInCurrentBoot() || !a.Stale || a.BootID != bootOne || !reflect.DeepEqual(a.Drivers, gpuDevices) {
		t.Fatalf("claim A after reboot: %+v", a)
	}
	e, err := c.StartPrepare(claimA, "pod-1")
	if err != nil {
		t.Fatalf("StartPrepare after reboot: %v", err)
	}
	if e.State != PrepareStarted || e.Stale || e.BootID != bootTwo || !reflect.DeepEqual(e.Drivers, gpuDevices) {
		t.Fatalf("after StartPrepare in the new boot: %+v", e)
	}
}

func TestUIDMismatchAndLookups(t *testing.T) {
	c, _ := openT(t, t.TempDir(), bootOne)
	defer c.Close()
	if _, err := c.StartPrepare(claimA, "pod-1"); err != nil {
		t.Fatal(err)
	}
	recreated := ClaimRef{Namespace: claimA.Namespace, Name: claimA.Name, UID: "uid-a2"}
	want := &UIDMismatchError{Namespace: "ns", Name: "claim-a", RecordedUID: "uid-a", RequestedUID: "uid-a2"}
	for name, call := range map[string]func() error{
		"StartPrepare":   func() error { _, err := c.StartPrepare(recreated, "pod-2"); return err },
		"RecordPrepared": func() error { _, err := c.RecordPrepared(recreated, gpuDevices); return err },
		"Lookup":         func() error { _, err := c.Lookup(recreated); return err },
	} {
		err := call()
		var got *UIDMismatchError
		if !errors.As(err, &got) || !reflect.DeepEqual(got, want) || !errors.Is(err, ErrUIDMismatch) {
			t.Errorf("%s with a recreated claim: %v, want %v", name, err, want)
		}
	}
	if _, err := c.Get("uid-a2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("refused StartPrepare recorded something: %v", err)
	}
	if e, err := c.LookupName("ns", "claim-a"); err != nil || e.Claim != claimA {
		t.Errorf("LookupName: %+v, %v", e, err)
	}
	if e, err := c.Lookup(claimA); err != nil || e.Claim != claimA {
		t.Errorf("Lookup: %+v, %v", e, err)
	}
	if _, err := c.LookupName("ns", "other"); !errors.Is(err, ErrNotFound) {
		t.Errorf("LookupName of unknown claim: %v", err)
	}
	renamed := ClaimRef{Namespace: "ns", Name: "other", UID: claimA.UID}
	if _, err := c.Lookup(renamed); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Lookup of a recorded UID under another name: %v", err)
	}
	if _, err := c.StartPrepare(renamed, ""); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("StartPrepare of a recorded UID under another name: %v", err)
	}
	if _, err := c.RecordPrepared(renamed, gpuDevices); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("RecordPrepared of a recorded UID under another name: %v", err)
	}
	// Once the old claim is unprepared the name is free for the new UID.
	if _, err := c.StartUnprepare(claimA.UID); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(claimA.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartPrepare(recreated, "pod-2"); err != nil {
		t.Fatalf("StartPrepare after the old claim was removed: %v", err)
	}
}

func TestInvalidArguments(t *testing.T) {
	c, _ := openT(t, t.TempDir(), bootOne)
	defer c.Close()
	if _, err := c.StartPrepare(claimA, ""); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
		say  string
	}{
		{"StartPrepare empty UID", func() error { _, err := c.StartPrepare(ClaimRef{Namespace: "n", Name: "x"}, ""); return err }, "empty UID"},
		{"StartPrepare empty name", func() error { _, err := c.StartPrepare(ClaimRef{Namespace: "n", UID: "u"}, ""); return err }, "empty name"},
		{"StartPrepare empty namespace", func() error { _, err := c.StartPrepare(ClaimRef{Name: "x", UID: "u"}, ""); return err }, "empty namespace"},
		{"FinishPrepare empty driver", func() error {
			_, err := c.FinishPrepare(claimA.UID, map[string][]Device{"": {{Pool: "p", Device: "d"}}})
			return err
		}, "empty driver name"},
		{"FinishPrepare device without pool", func() error {
			_, err := c.FinishPrepare(claimA.UID, map[string][]Device{"drv": {{Device: "d"}}})
			return err
		}, "pool and device names must be set"},
		{"FinishPrepare empty CDI ID", func() error {
			_, err := c.FinishPrepare(claimA.UID, map[string][]Device{"drv": {{Pool: "p", Device: "d", CDIDeviceIDs: []string{""}}}})
			return err
		}, "empty CDI device ID"},
		{"AddPod empty pod", func() error { _, err := c.AddPod(claimA.UID, ""); return err }, "pod UID"},
		{"RemovePod empty claim", func() error { _, err := c.RemovePod("", "pod"); return err }, "claim UID"},
		{"StartUnprepare empty", func() error { _, err := c.StartUnprepare(""); return err }, "empty UID"},
		{"RecordPrepared empty UID", func() error { _, err := c.RecordPrepared(ClaimRef{Namespace: "n", Name: "x"}, gpuDevices); return err }, "empty UID"},
		{"RecordPrepared device without pool", func() error {
			_, err := c.RecordPrepared(ClaimRef{Namespace: "n", Name: "x", UID: "u"}, map[string][]Device{"drv": {{Device: "d"}}})
			return err
		}, "pool and device names must be set"},
		{"RemovePrepared empty", func() error { return c.RemovePrepared("") }, "empty UID"},
		{"Remove empty", func() error { return c.Remove("") }, "empty UID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("got %v, want ErrInvalidArgument saying %q", err, tc.say)
			}
		})
	}
	if e, _ := c.Get(claimA.UID); e.State != PrepareStarted {
		t.Fatalf("invalid calls changed the entry: %+v", e)
	}
	if _, _, err := Open(t.TempDir(), ""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Open with empty boot ID: %v", err)
	}
}

func TestClosed(t *testing.T) {
	dir := t.TempDir()
	c, _ := openT(t, dir, bootOne)
	if _, _, err := Open(dir, bootOne); !errors.Is(err, checkpoint.ErrLocked) {
		t.Fatalf("second Open of a directory in use: %v, want checkpoint.ErrLocked", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.StartPrepare(claimA, ""); !errors.Is(err, ErrClosed) {
		t.Fatalf("StartPrepare after Close: %v", err)
	}
	if _, err := c.DropGone(func(ClaimRef) (bool, error) { return false, nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("DropGone after Close: %v", err)
	}
	c2, _ := openT(t, dir, bootOne) // the lock was released
	c2.Close()
}

func TestRecordEqual(t *testing.T) {
	base := &record{Namespace: "n", Name: "c", UID: "u", State: Prepared, BootID: "b", PodUIDs: []string{"p"}}
	base.setDrivers(gpuDevices)
	tests := []struct {
		name   string
		change func(r *record)
		equal  bool
	}{
		{"same", func(*record) {}, true},
		{"state", func(r *record) { r.State = UnprepareStarted }, false},
		{"boot", func(r *record) { r.BootID = "other" }, false},
		{"pod added", func(r *record) { r.addPod("q") }, false},
		{"pod removed", func(r *record) { r.removePod("p") }, false},
		{"driver dropped", func(r *record) { r.Drivers = r.Drivers[:1] }, false},
		{"CDI ID", func(r *record) { r.Drivers[0].Devices[0].CDIDeviceIDs[0] = "x" }, false},
		{"share ID", func(r *record) { r.Drivers[0].Devices[1].ShareID = "" }, false},
		{"request", func(r *record) { r.Drivers[1].Devices[0].Requests = nil }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			other := base.clone()
			tc.change(other)
			if got := base.equal(other); got != tc.equal {
				t.Fatalf("equal = %v, want %v", got, tc.equal)
			}
		})
	}
}
