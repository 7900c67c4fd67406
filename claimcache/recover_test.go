package claimcache

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dranode/dranode/checkpoint"
)

var recovering = WithJournalOptions(checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside))

// recordOp is one call that appends exactly one record to the journal.
type recordOp struct {
	uid string
	do  func(c *Cache) error
}

func devOf(name string) map[string][]Device {
	return map[string][]Device{"d": {{Pool: "p", Device: name, CDIDeviceIDs: []string{"v/c=" + name}}}}
}

var recordOps = []recordOp{
	{"ua", func(c *Cache) error { _, err := c.StartPrepare(ClaimRef{"n", "a", "ua"}, "pa"); return err }},
	{"ua", func(c *Cache) error { _, err := c.FinishPrepare("ua", devOf("x")); return err }},
	{"ub", func(c *Cache) error { _, err := c.StartPrepare(ClaimRef{"n", "b", "ub"}, "pb"); return err }},
	{"ub", func(c *Cache) error { _, err := c.FinishPrepare("ub", devOf("y")); return err }},
	{"ua", func(c *Cache) error { _, err := c.StartUnprepare("ua"); return err }},
	{"ua", func(c *Cache) error { return c.Remove("ua") }},
	{"uc", func(c *Cache) error { _, err := c.StartPrepare(ClaimRef{"n", "c", "uc"}, "pc"); return err }},
}

// builtRecord is a claim record written through the Cache, with what it
// held after every record of its live log.
type builtRecord struct {
	files     map[string][]byte // every file but the lock
	log       string            // the live log's name
	bounds    []int             // the log's size before its first record and after each
	states    []map[string]Entry
	ops       []recordOp // the ops whose records are in the log, in order
	final     map[string]Entry
	everUIDs  map[string]bool
	snapshots bool
}

func entriesByUID(c *Cache) map[string]Entry {
	out := map[string]Entry{}
	for _, e := range c.List() {
		out[e.Claim.UID] = e
	}
	return out
}

// buildRecord runs recordOps; withSnapshot compacts after the fifth, so
// that the record is a snapshot and a log holding the last two.
func buildRecord(t *testing.T, withSnapshot bool) *builtRecord {
	dir := t.TempDir()
	b := &builtRecord{everUIDs: map[string]bool{}, snapshots: withSnapshot}
	c, _ := openT(t, dir, bootOne)
	logSize := func() int {
		logs, _ := filepath.Glob(filepath.Join(dir, "log.*"))
		slices.Sort(logs)
		b.log = filepath.Base(logs[len(logs)-1])
		st, err := os.Stat(logs[len(logs)-1])
		if err != nil {
			t.Fatal(err)
		}
		return int(st.Size())
	}
	first := 0
	if withSnapshot {
		for _, op := range recordOps[:4] {
			if err := op.do(c); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
		var err error
		c, _, err = Open(dir, bootOne, WithJournalOptions(checkpoint.WithCompaction(1, 1)))
		if err != nil {
			t.Fatal(err)
		}
		if err := recordOps[4].do(c); err != nil {
			t.Fatal(err)
		}
		c.Close() // waits for the compaction
		c, _ = openT(t, dir, bootOne)
		first = 5
		if _, err := os.Stat(filepath.Join(dir, "snapshot")); err != nil {
			t.Fatalf("no snapshot: %v", err)
		}
	}
	b.bounds = []int{logSize()}
	b.states = []map[string]Entry{entriesByUID(c)}
	for _, op := range recordOps[first:] {
		if err := op.do(c); err != nil {
			t.Fatal(err)
		}
		b.bounds = append(b.bounds, logSize())
		b.states = append(b.states, entriesByUID(c))
		b.ops = append(b.ops, op)
	}
	for _, op := range recordOps {
		b.everUIDs[op.uid] = true
	}
	b.final = entriesByUID(c)
	c.Close()
	b.files = map[string][]byte{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "lock" {
			b.files[e.Name()], _ = os.ReadFile(filepath.Join(dir, e.Name()))
		}
	}
	for i := 1; i < len(b.bounds); i++ {
		if b.bounds[i] <= b.bounds[i-1] {
			t.Fatalf("op %d wrote no record", i)
		}
	}
	return b
}

// TestRecoverClaimsAtEveryOffset damages a small claim record at every
// offset of every file (a flipped byte; a truncation), logs only and a
// snapshot with a log, opens it with MoveCorruptAside and checks, claim by
// claim, against what the record held after each of its records: each
// claim restored is exactly as it was before the damage; each claim a
// change after the damage names is an uncertain PrepareStarted entry that
// holds every device it held; no claim is invented; a claim that is gone
// is reported (Unknown) and never silently; the aside copy holds the
// remainder; and a plain reopen finds the same entries, still uncertain.
func TestRecoverClaimsAtEveryOffset(t *testing.T) {
	type job struct {
		b        *builtRecord
		file     string
		off      int
		truncate bool
	}
	var jobs []job
	for _, withSnapshot := range []bool{false, true} {
		b := buildRecord(t, withSnapshot)
		for name, data := range b.files {
			for off := range len(data) {
				if testing.Short() && off%4 != 0 {
					continue
				}
				jobs = append(jobs, job{b, name, off, false}, job{b, name, off, true})
			}
		}
	}
	next := make(chan job)
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for jb := range next {
				if err := checkClaimRecovery(t.TempDir(), jb.b, jb.file, jb.off, jb.truncate); err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("snapshot=%v %s truncate=%v @%d: %v", jb.b.snapshots, jb.file, jb.truncate, jb.off, err))
					mu.Unlock()
				}
			}
		})
	}
	for _, jb := range jobs {
		next <- jb
	}
	close(next)
	wg.Wait()
	slices.Sort(failures)
	for i, f := range failures {
		if i == 10 {
			t.Errorf("... and %d more", len(failures)-10)
			break
		}
		t.Error(f)
	}
	t.Logf("%d damaged records, %d failures", len(jobs), len(failures))
}

func sameEntry(a, b Entry) bool {
	return a.Claim == b.Claim && a.State == b.State && a.BootID == b.BootID && a.Uncertain == b.Uncertain &&
		slices.Equal(a.PodUIDs, b.PodUIDs) && reflect.DeepEqual(a.Drivers, b.Drivers)
}

func checkClaimRecovery(dir string, b *builtRecord, file string, off int, truncate bool) error {
	damaged := bytes.Clone(b.files[file])
	if truncate {
		damaged = damaged[:off]
	} else {
		damaged[off] ^= 0x01
	}
	for name, data := range b.files {
		if name == file {
			data = damaged
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	c, rep, err := Open(dir, bootOne, recovering)
	if err != nil {
		return fmt.Errorf("Open: %v", err)
	}
	got := entriesByUID(c)
	c.Close()
	d := rep.Damage
	named := map[string]UncertainClaim{}
	if d != nil {
		for _, u := range d.Uncertain {
			named[u.Claim.UID] = u
		}
	}

	// Never invented; never forgotten without saying so; uncertain entries
	// hold every device of the claim.
	for uid, e := range got {
		if !b.everUIDs[uid] {
			return fmt.Errorf("invented claim %s", uid)
		}
		if e.Uncertain != "" {
			if u, ok := named[uid]; !ok || !u.Recorded || e.State != PrepareStarted {
				return fmt.Errorf("uncertain entry %+v not reported as recorded (%+v)", e, u)
			}
		}
	}
	for uid, want := range b.final {
		e, ok := got[uid]
		switch {
		case !ok && (d == nil || !d.Unknown) && !b.lostToTornTail(file, off, truncate):
			return fmt.Errorf("claim %s forgotten without Unknown in the report (damage %+v)", uid, d)
		case ok && e.Uncertain != "" && !holdsAll(e, want.Drivers) && (d == nil || !d.Unknown):
			// Devices named only by a change nobody can read must come
			// from the kubelet's checkpoint, which Unknown calls for.
			return fmt.Errorf("uncertain %s holds %v, not every device of %v, without Unknown", uid, e.Drivers, want.Drivers)
		}
	}

	if file == "snapshot" {
		// Damage in a snapshot: the log after it is replayed, so what is
		// restored and certain is the final state.
		if d == nil {
			return fmt.Errorf("damaged snapshot not reported")
		}
		for uid, e := range got {
			if want, ok := b.final[uid]; e.Uncertain == "" && (!ok || !sameEntry(e, want)) {
				return fmt.Errorf("restored %s as %+v, want %+v", uid, e, want)
			}
		}
		return reopenSame(dir, got)
	}

	// Damage in the log: r is the damaged record, -1 for the header.
	r := -1
	for i := 0; i+1 < len(b.bounds); i++ {
		if off >= b.bounds[i] && off < b.bounds[i+1] {
			r = i
		}
	}
	torn := r >= 0 && (truncate || r == len(b.ops)-1)
	k := max(r, 0) // records restored from the log
	prefix := b.states[k]
	if torn {
		if d != nil {
			return fmt.Errorf("torn tail reported as damage: %+v", d)
		}
		if !maps.EqualFunc(got, prefix, sameEntry) {
			return fmt.Errorf("after a torn tail: %v, want %v", got, prefix)
		}
		return nil
	}
	if d == nil {
		return fmt.Errorf("damage not reported")
	}
	start := 0
	if r >= 0 {
		start = b.bounds[r]
	}
	wantAside := 1
	if start == len(damaged) {
		wantAside = 0 // nothing left to copy
	}
	if d.Cause.Path != filepath.Join(dir, file) || len(d.Aside) != wantAside {
		return fmt.Errorf("damage %v, aside %+v: want %s from offset %d", d.Cause, d.Aside, file, start)
	}
	for _, a := range d.Aside {
		if aside, err := os.ReadFile(a.Path); err != nil || a.Offset != int64(start) || !bytes.Equal(aside, damaged[start:]) {
			return fmt.Errorf("aside copy %+v does not hold the remainder (%v)", a, err)
		}
	}
	// Damage in a log always loses something unreadable (the damaged
	// record, or the header), which may have changed any restored claim.
	wantNamed := map[string]bool{}
	for uid := range prefix {
		wantNamed[uid] = true
	}
	if !truncate {
		for _, op := range b.ops[r+1:] {
			wantNamed[op.uid] = true
		}
	}
	gotNamed := map[string]bool{}
	for uid := range named {
		gotNamed[uid] = true
	}
	if !maps.Equal(wantNamed, gotNamed) {
		return fmt.Errorf("uncertain claims %v, want %v", named, wantNamed)
	}
	for uid, e := range got {
		was, existed := prefix[uid]
		switch {
		case e.Uncertain == "" && (!existed || !sameEntry(e, was)):
			return fmt.Errorf("restored %s as %+v, want %+v from before the damage", uid, e, was)
		case e.Uncertain != "" && existed && !holdsAll(e, was.Drivers):
			return fmt.Errorf("uncertain %s lost devices it held before the damage", uid)
		}
	}
	for uid := range prefix {
		if _, ok := got[uid]; !ok {
			return fmt.Errorf("claim %s from before the damage is gone", uid)
		}
	}
	return reopenSame(dir, got)
}

// lostToTornTail: a change in the last record of the last log, cut as a
// torn append, can make a final claim absent without any damage.
func (b *builtRecord) lostToTornTail(file string, off int, truncate bool) bool {
	return file == b.log && off >= b.bounds[0] && (truncate || off >= b.bounds[len(b.bounds)-2])
}

// reopenSame: what the recovery decided is durable, uncertainty included.
func reopenSame(dir string, want map[string]Entry) error {
	c, rep, err := Open(dir, bootOne)
	if err != nil {
		return fmt.Errorf("reopen: %v", err)
	}
	defer c.Close()
	if got := entriesByUID(c); rep.Damage != nil || !maps.EqualFunc(got, want, sameEntry) {
		return fmt.Errorf("reopened as %v (damage %+v), want %v", got, rep.Damage, want)
	}
	var uncertain []string
	for _, e := range rep.Uncertain {
		uncertain = append(uncertain, e.Claim.UID)
	}
	var wantUncertain []string
	for _, uid := range slices.Sorted(maps.Keys(want)) {
		if want[uid].Uncertain != "" {
			wantUncertain = append(wantUncertain, uid)
		}
	}
	if strings.Join(uncertain, ",") != strings.Join(wantUncertain, ",") {
		return fmt.Errorf("reopen reports uncertain %v, want %v", uncertain, wantUncertain)
	}
	return nil
}

// TestRecordUncertain: a claim the record lost can be recorded as
// uncertain (and added to while it is), never over a claim whose state is
// known; an uncertain entry is settled by StartPrepare or StartUnprepare,
// cannot FinishPrepare before a StartPrepare, and is never in Interrupted.
func TestRecordUncertain(t *testing.T) {
	dir := t.TempDir()
	c, _ := openT(t, dir, bootOne)
	ref := ClaimRef{"n", "k", "uk"}
	e, err := c.RecordUncertain(ref, devOf("x"), "listed by the kubelet")
	if err != nil || e.State != PrepareStarted || e.Uncertain != "listed by the kubelet" || len(e.Drivers["d"]) != 1 {
		t.Fatalf("RecordUncertain: %+v, %v", e, err)
	}
	if e, err = c.RecordUncertain(ref, devOf("y"), "again"); err != nil || len(e.Drivers["d"]) != 2 {
		t.Fatalf("RecordUncertain on an uncertain entry must add devices: %+v, %v", e, err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"empty reason", func() error { _, err := c.RecordUncertain(ClaimRef{"n", "z", "uz"}, nil, ""); return err }, ErrInvalidArgument},
		{"device without a name", func() error {
			_, err := c.RecordUncertain(ClaimRef{"n", "z", "uz"}, map[string][]Device{"d": {{Pool: "p"}}}, "r")
			return err
		}, ErrInvalidArgument},
		{"name held by another UID", func() error { _, err := c.RecordUncertain(ClaimRef{"n", "k", "other"}, nil, "r"); return err }, ErrUIDMismatch},
	} {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	c.Close()
	c, rep := openT(t, dir, bootOne)
	defer c.Close()
	if len(rep.Uncertain) != 1 || len(rep.Interrupted) != 0 || rep.Uncertain[0].Claim != ref {
		t.Fatalf("report %+v, want the claim uncertain and not interrupted", rep)
	}
	if _, err := c.FinishPrepare(ref.UID, devOf("x")); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("FinishPrepare without StartPrepare: %v", err)
	}
	if e, err := c.StartPrepare(ref, "p"); err != nil || e.Uncertain != "" || len(e.Drivers["d"]) != 2 {
		t.Fatalf("StartPrepare must settle it and keep its devices: %+v, %v", e, err)
	}
	if e, err := c.FinishPrepare(ref.UID, devOf("x")); err != nil || e.State != Prepared || len(e.Drivers["d"]) != 1 {
		t.Fatalf("FinishPrepare: %+v, %v", e, err)
	}
	if _, err := c.RecordUncertain(ref, nil, "r"); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("RecordUncertain over a known state: %v", err)
	}
	if _, err := c.RecordUncertain(ClaimRef{"n", "u", "uu"}, devOf("z"), "r"); err != nil {
		t.Fatal(err)
	}
	if e, err := c.StartUnprepare("uu"); err != nil || e.Uncertain != "" || e.Drivers["d"][0].Device != "z" {
		t.Fatalf("StartUnprepare must settle it and hand over its devices: %+v, %v", e, err)
	}
}

// TestReconcile: each rule of Reconcile, with the API server and the drivers
// played by functions (pure decision logic; the record is real), and the
// outcome durable across a reopen.
func TestReconcile(t *testing.T) {
	dir := t.TempDir()
	c, _ := openT(t, dir, bootOne)
	known := ClaimRef{"n", "known", "uk"}
	c.StartPrepare(known, "p")
	c.FinishPrepare(known.UID, devOf("k"))
	uncertain := func(name string, dev string) ClaimRef {
		ref := ClaimRef{"n", name, "u-" + name}
		if _, err := c.RecordUncertain(ref, devOf(dev), "test"); err != nil {
			t.Fatal(err)
		}
		return ref
	}
	listed := uncertain("listed", "a")
	gone := uncertain("gone", "b")
	exists := uncertain("exists", "c")
	apiDown := uncertain("api-down", "d")
	stuck := uncertain("stuck", "e")
	fresh := ClaimRef{"n", "fresh", "u-fresh"}

	var unprepared []string
	res := c.Reconcile(Reconciler{
		Kubelet: []KubeletClaim{
			{known, devOf("other")},                       // known state: untouched
			{listed, devOf("a2")},                         // a device only the kubelet names
			{fresh, devOf("f")},                           // only the kubelet knows it
			{ClaimRef{"n", "known", "u-new"}, devOf("z")}, // name held by another UID
		},
		Exists: func(ref ClaimRef) (bool, error) {
			switch ref.UID {
			case apiDown.UID:
				return false, errors.New("API server unreachable")
			case exists.UID:
				return true, nil
			}
			return false, nil
		},
		Unprepare: func(e Entry) error {
			if e.Claim == stuck {
				return errors.New("driver failed")
			}
			unprepared = append(unprepared, e.Claim.UID+":"+e.Drivers["d"][0].Device)
			return nil
		},
	})
	names := func(es []Entry) string {
		var out []string
		for _, e := range es {
			out = append(out, e.Claim.Name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct{ what, got, want string }{
		{"recorded", names(res.Recorded), "fresh,listed"},
		{"kept", names(res.Kept), "fresh,listed"},
		{"unprepared", names(res.Unprepared), "gone"},
		{"waiting", names(res.Waiting), "exists"},
		{"driver calls", strings.Join(unprepared, ","), "u-gone:b"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %q, want %q", tc.what, tc.got, tc.want)
		}
	}
	if len(res.Errors) != 3 || !errors.Is(res.Errors[0], ErrUIDMismatch) {
		t.Errorf("errors %v, want the UID mismatch, the API server and the driver", res.Errors)
	}
	c.Close()

	c, rep := openT(t, dir, bootOne)
	defer c.Close()
	get := func(ref ClaimRef) Entry {
		e, err := c.Get(ref.UID)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		return e
	}
	if e := get(known); e.State != Prepared || e.Uncertain != "" || len(e.Drivers["d"]) != 1 {
		t.Errorf("a claim with a known state was touched: %+v", e)
	}
	if e := get(listed); e.Uncertain == "" || len(e.Drivers["d"]) != 2 {
		t.Errorf("listed: %+v, want uncertain with both devices", e)
	}
	if e := get(fresh); e.Uncertain == "" || e.State != PrepareStarted || e.Drivers["d"][0].Device != "f" {
		t.Errorf("fresh: %+v, want recorded uncertain with the kubelet's device", e)
	}
	if _, err := c.Get(gone.UID); !errors.Is(err, ErrNotFound) {
		t.Errorf("gone: %v, want removed", err)
	}
	if e := get(stuck); e.State != UnprepareStarted {
		t.Errorf("stuck: %+v, want UnprepareStarted for a retry", e)
	}
	if names(rep.Uncertain) != "api-down,exists,fresh,listed" {
		t.Errorf("still uncertain after reopen: %s", names(rep.Uncertain))
	}
}
