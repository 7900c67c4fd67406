package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

type claim struct {
	Name    string   `json:"name"`
	Devices []string `json:"devices"`
}

var claimSchema = Schema{Kind: "dranode.io/test-claims", Version: 1}

func openJ(t *testing.T, dir string, s Schema, opts ...Option) *Journal[claim] {
	t.Helper()
	j, err := OpenJournal[claim](dir, s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func reopen(t *testing.T, j *Journal[claim], s Schema, opts ...Option) *Journal[claim] {
	t.Helper()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return openJ(t, j.Dir(), s, opts...)
}

func TestJournalRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	j := openJ(t, dir, claimSchema)
	if err := j.Put("a", claim{Name: "a", Devices: []string{"gpu-0"}}); err != nil {
		t.Fatal(err)
	}
	if err := j.Put("b", claim{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := j.Commit(
		Change[claim]{Key: "c", Value: claim{Name: "c"}},
		Change[claim]{Key: "a", Delete: true},
		Change[claim]{Key: "b", Value: claim{Name: "b2"}},
	); err != nil {
		t.Fatal(err)
	}
	if err := j.Delete("never-there"); err != nil {
		t.Fatal(err)
	}
	want := map[string]claim{"b": {Name: "b2"}, "c": {Name: "c"}}
	if got := j.Snapshot(); !maps.EqualFunc(got, want, claimEqual) {
		t.Fatalf("before reopen %v, want %v", got, want)
	}
	j = reopen(t, j, claimSchema)
	if got := j.Snapshot(); !maps.EqualFunc(got, want, claimEqual) {
		t.Fatalf("after reopen %v, want %v", got, want)
	}
	if v, ok, err := j.Get("b"); err != nil || !ok || v.Name != "b2" {
		t.Fatalf("Get(b) = %v, %v, %v", v, ok, err)
	}
	if _, ok, err := j.Get("a"); err != nil || ok {
		t.Fatalf("Get of deleted key a = %v, %v; want absent", ok, err)
	}
	if j.Len() != 2 {
		t.Fatalf("Len %d, want 2", j.Len())
	}
	for _, name := range []string{"lock", "log.1"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600", name, st, err)
		}
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %v, want 0700", st.Mode().Perm())
	}
}

func claimEqual(a, b claim) bool {
	return a.Name == b.Name && strings.Join(a.Devices, ",") == strings.Join(b.Devices, ",")
}

func TestJournalErrors(t *testing.T) {
	dir := t.TempDir()
	j := openJ(t, dir, claimSchema)
	if _, err := OpenJournal[claim](dir, claimSchema); !errors.Is(err, ErrLocked) {
		t.Fatalf("second OpenJournal: %v, want ErrLocked", err)
	}
	if err := j.Put("", claim{}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("empty key: %v, want ErrInvalidKey", err)
	}
	if err := j.Commit(Change[claim]{Key: "ok"}, Change[claim]{Key: "", Delete: true}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("batch with an empty key: %v, want ErrInvalidKey", err)
	}
	if j.Len() != 0 {
		t.Fatal("a rejected batch was partly applied")
	}
	bad := openJ(t, t.TempDir(), claimSchema)
	_ = bad
	jf, err := OpenJournal[func()](t.TempDir(), claimSchema)
	if err != nil {
		t.Fatal(err)
	}
	defer jf.Close()
	if err := jf.Put("f", func() {}); err == nil || !strings.Contains(err.Error(), `commit "f": encode value`) {
		t.Fatalf("unencodable value: %v", err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Put("a", claim{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close: %v, want ErrClosed", err)
	}
	if err := j.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}
}

func TestJournalValuesAreIsolated(t *testing.T) {
	j := openJ(t, t.TempDir(), claimSchema)
	v := claim{Name: "a", Devices: []string{"gpu-0"}}
	if err := j.Put("a", v); err != nil {
		t.Fatal(err)
	}
	v.Devices[0] = "changed by the caller"
	if got, _, _ := j.Get("a"); got.Devices[0] != "gpu-0" {
		t.Fatalf("caller's later change reached the journal: %v", got)
	}
	got, _, _ := j.Get("a")
	got.Devices[0] = "changed via Get"
	if again := j.Snapshot()["a"]; again.Devices[0] != "gpu-0" {
		t.Fatalf("change to a Get result reached the journal: %v", again)
	}
}

// TestGroupCommit proves by counting, not timing, that concurrent commits
// share fsyncs.
func TestGroupCommit(t *testing.T) {
	const writers = 64
	j := openJ(t, t.TempDir(), claimSchema)
	before := j.Fsyncs()
	// The first leader waits until every writer has queued its record, so
	// that the count below does not depend on how the machine schedules
	// 64 goroutines (on a loaded machine, late arrivals made a ninth
	// fsync): one batch, one fsync, for all of them.
	queued := j.enqueued.Load()
	var first sync.Once
	j.beforeFlush = func() {
		first.Do(func() {
			for j.enqueued.Load() < queued+writers {
				runtime.Gosched()
			}
		})
	}
	start := make(chan struct{})
	var wg, ready sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		ready.Add(1)
		wg.Go(func() {
			ready.Done()
			<-start
			key := fmt.Sprintf("claim-%d", i)
			errs <- j.Put(key, claim{Name: key})
		})
	}
	ready.Wait()
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	fsyncs := j.Fsyncs() - before
	if fsyncs != 1 {
		t.Fatalf("%d writers queued together made %d fsyncs, want 1", writers, fsyncs)
	}
	if j.Len() != writers {
		t.Fatalf("%d keys, want %d", j.Len(), writers)
	}
	// Every acknowledged record is on disk.
	j = reopen(t, j, claimSchema)
	if j.Len() != writers {
		t.Fatalf("after reopen %d keys, want %d", j.Len(), writers)
	}
}

func TestSequentialCommitsFsyncOnce(t *testing.T) {
	j := openJ(t, t.TempDir(), claimSchema, WithCompaction(1<<30, 1))
	before := j.Fsyncs()
	for i := range 10 {
		if err := j.Put(fmt.Sprint(i), claim{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := j.Fsyncs() - before; n != 10 {
		t.Fatalf("10 sequential Puts made %d fsyncs, want exactly 10", n)
	}
}

func logFile(t *testing.T, dir string) string {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "log.*"))
	var live []string
	for _, l := range logs {
		if !strings.Contains(l, "corrupt") {
			live = append(live, l)
		}
	}
	if len(live) == 0 {
		t.Fatal("no log file")
	}
	return live[len(live)-1]
}

func fill(t *testing.T, j *Journal[claim], n int) {
	t.Helper()
	for i := range n {
		key := fmt.Sprintf("claim-%d", i)
		if err := j.Put(key, claim{Name: key, Devices: []string{"gpu-0"}}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestJournalTornTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		tear func(full []byte, lastStart int) []byte
	}{
		{"half a frame header", func(b []byte, last int) []byte { return b[:last+3] }},
		{"header without payload", func(b []byte, last int) []byte { return b[:last+frameHdrLen] }},
		{"payload cut short", func(b []byte, last int) []byte { return b[:len(b)-1] }},
		{"zeros after the last record", func(b []byte, last int) []byte { return append(b[:last], make([]byte, 4096)...) }},
		{"garbage after the last record", func(b []byte, last int) []byte {
			return append(b[:last], bytes.Repeat([]byte{0xde, 0xad}, 100)...)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			j := openJ(t, dir, claimSchema)
			fill(t, j, 3)
			path := logFile(t, dir)
			st, _ := os.Stat(path)
			lastStart := int(st.Size())
			// The last record is an atomic batch of two changes: a torn
			// write must lose both.
			if err := j.Commit(Change[claim]{Key: "x", Value: claim{Name: "x"}}, Change[claim]{Key: "claim-0", Delete: true}); err != nil {
				t.Fatal(err)
			}
			j.Close()
			full, _ := os.ReadFile(path)
			if err := os.WriteFile(path, tc.tear(full, lastStart), 0o600); err != nil {
				t.Fatal(err)
			}
			j = openJ(t, dir, claimSchema)
			got := j.Snapshot()
			if len(got) != 3 || got["claim-0"].Name != "claim-0" {
				t.Fatalf("after a torn last record: %v, want the three acknowledged claims and nothing of the torn batch", got)
			}
			if st, _ := os.Stat(path); st.Size() != int64(lastStart) {
				t.Fatalf("torn tail not cut: log is %d bytes, want %d", st.Size(), lastStart)
			}
			// Appending after the cut works and survives a reopen.
			if err := j.Put("y", claim{Name: "y"}); err != nil {
				t.Fatal(err)
			}
			j = reopen(t, j, claimSchema)
			if _, ok := j.Snapshot()["y"]; !ok || j.Len() != 4 {
				t.Fatalf("after appending past a cut tail: %v", j.Snapshot())
			}
		})
	}
}

func TestJournalCorruptMiddleRecord(t *testing.T) {
	dir := t.TempDir()
	j := openJ(t, dir, claimSchema)
	fill(t, j, 2)
	path := logFile(t, dir)
	st, _ := os.Stat(path)
	second := st.Size() // offset of the third record
	fill(t, j, 5)
	j.Close()
	data, _ := os.ReadFile(path)
	data[second+frameHdrLen+2] ^= 1
	os.WriteFile(path, data, 0o600)

	_, err := OpenJournal[claim](dir, claimSchema)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Path != path || ce.Offset != second || !strings.Contains(ce.Reason, "followed by valid records") {
		t.Fatalf("got %v, want *CorruptError at %s offset %d", err, path, second)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
		t.Fatal("a corrupt log was modified under FailOnCorrupt")
	}

	j, err = OpenJournal[claim](dir, claimSchema, WithCorruptPolicy(MoveCorruptAside))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	// The two records before the damage are kept; the five after it are
	// reported, not applied.
	if got := j.Snapshot(); len(got) != 2 || got["claim-0"].Name != "claim-0" || got["claim-1"].Name != "claim-1" {
		t.Fatalf("MoveCorruptAside kept %v, want the two records before the damage", got)
	}
	rec := j.Recovery()
	if rec == nil || rec.Damage.Path != path || rec.Damage.Offset != second || rec.Kept != 2 {
		t.Fatalf("Recovery %+v, want damage at %s offset %d and 2 records kept", rec, path, second)
	}
	if len(rec.Aside) != 1 || rec.Aside[0].From != path || rec.Aside[0].Offset != second || !strings.HasPrefix(rec.Aside[0].Path, path+".corrupt-") {
		t.Fatalf("aside %+v, want %s from offset %d in %s.corrupt-<timestamp>", rec.Aside, path, second, path)
	}
	if evidence, _ := os.ReadFile(rec.Aside[0].Path); !bytes.Equal(evidence, data[second:]) {
		t.Fatal("the aside copy does not hold the remainder of the damaged log")
	}
	var keys []string
	for _, u := range rec.Unsure {
		keys = append(keys, u.Key)
	}
	if strings.Join(keys, ",") != "claim-1,claim-2,claim-3,claim-4" {
		t.Fatalf("unsure changes %v, want the four readable records after the damaged one", keys)
	}
	if err := j.Put("fresh", claim{}); err != nil {
		t.Fatal(err)
	}
	j = reopen(t, j, claimSchema)
	if j.Recovery() != nil || j.Len() != 3 {
		t.Fatalf("after the recovery was written: Recovery %+v, %d keys, want none and 3", j.Recovery(), j.Len())
	}
}

func TestJournalCompaction(t *testing.T) {
	dir := t.TempDir()
	j := openJ(t, dir, claimSchema, WithCompaction(4096, 2))
	want := map[string]claim{}
	for i := range 2000 {
		key := fmt.Sprintf("claim-%d", i%150)
		if i%7 == 0 {
			if err := j.Delete(key); err != nil {
				t.Fatal(err)
			}
			delete(want, key)
			continue
		}
		v := claim{Name: fmt.Sprint(i)}
		if err := j.Put(key, v); err != nil {
			t.Fatal(err)
		}
		want[key] = v
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "snapshot")); err != nil {
		t.Fatalf("no snapshot after compaction: %v", err)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "log.*"))
	if len(logs) != 1 || logs[0] == filepath.Join(dir, "log.1") {
		t.Fatalf("logs after compaction %v, want one later generation", logs)
	}
	st, _ := os.Stat(logs[0])
	if st.Size() > 8192 {
		t.Fatalf("live log is %d bytes; compaction did not bound it", st.Size())
	}
	j = openJ(t, dir, claimSchema)
	if got := j.Snapshot(); !maps.EqualFunc(got, want, claimEqual) {
		t.Fatalf("after compaction and reopen: %d keys, want %d", len(got), len(want))
	}
}

// TestJournalCompactionCrashStates builds, by hand, the directory states a
// crash can leave in the middle of a compaction and checks each restores
// the same state.
func TestJournalCompactionCrashStates(t *testing.T) {
	// Reference: generation 1 log with a, b; generation 2 log with c.
	base := t.TempDir()
	j := openJ(t, base, claimSchema)
	fill(t, j, 2)
	log1, _ := os.ReadFile(filepath.Join(base, "log.1"))
	j.mu.Lock()
	gen, entries, err := j.rotateLocked()
	j.mu.Unlock()
	if err != nil || gen != 2 {
		t.Fatal(gen, err)
	}
	if err := j.Put("claim-9", claim{Name: "claim-9"}); err != nil {
		t.Fatal(err)
	}
	log2, _ := os.ReadFile(filepath.Join(base, "log.2"))
	if err := j.writeSnapshot(gen, entries); err != nil {
		t.Fatal(err)
	}
	snap, _ := os.ReadFile(filepath.Join(base, "snapshot"))
	j.Close()
	want := []string{"claim-0", "claim-1", "claim-9"}

	for _, tc := range []struct {
		name  string
		files map[string][]byte
	}{
		{"rotated, snapshot not written", map[string][]byte{"log.1": log1, "log.2": log2}},
		{"rotated, snapshot temp half written", map[string][]byte{"log.1": log1, "log.2": log2, ".snapshot.tmp-1": snap[:len(snap)/2]}},
		{"snapshot renamed, old log not removed", map[string][]byte{"log.1": log1, "log.2": log2, "snapshot": snap}},
		{"done", map[string][]byte{"log.2": log2, "snapshot": snap}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tc.files {
				os.WriteFile(filepath.Join(dir, name), data, 0o600)
			}
			j := openJ(t, dir, claimSchema)
			got := j.Snapshot()
			if len(got) != len(want) {
				t.Fatalf("restored %v, want keys %v", got, want)
			}
			for _, k := range want {
				if got[k].Name != k {
					t.Fatalf("restored %v, want keys %v", got, want)
				}
			}
			names, _ := os.ReadDir(dir)
			for _, n := range names {
				if n.Name() == "log.1" && tc.files["snapshot"] != nil || strings.Contains(n.Name(), ".tmp-") {
					t.Fatalf("debris %s left after open", n.Name())
				}
			}
		})
	}

	t.Run("missing log generation", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "log.2"), log2, 0o600)
		if _, err := OpenJournal[claim](dir, claimSchema); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "generation 1 is missing") {
			t.Fatalf("got %v, want a corrupt error about the missing generation", err)
		}
	})
	t.Run("torn record in a log that is not the last", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "log.1"), log1[:len(log1)-2], 0o600)
		os.WriteFile(filepath.Join(dir, "log.2"), log2, 0o600)
		if _, err := OpenJournal[claim](dir, claimSchema); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "before the last log") {
			t.Fatalf("got %v, want a corrupt error", err)
		}
	})
	t.Run("damaged snapshot", func(t *testing.T) {
		dir := t.TempDir()
		bad := bytes.Clone(snap)
		bad[len(bad)-1] ^= 1
		os.WriteFile(filepath.Join(dir, "snapshot"), bad, 0o600)
		os.WriteFile(filepath.Join(dir, "log.2"), log2, 0o600)
		_, err := OpenJournal[claim](dir, claimSchema)
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Path != filepath.Join(dir, "snapshot") {
			t.Fatalf("got %v, want *CorruptError on the snapshot", err)
		}
	})
}

func TestJournalMigration(t *testing.T) {
	dir := t.TempDir()
	v1 := Schema{Kind: "dranode.io/test-devices", Version: 1}
	old, err := OpenJournal[json.RawMessage](dir, v1)
	if err != nil {
		t.Fatal(err)
	}
	old.Put("a", json.RawMessage(`{"device":"gpu-0","numa":1}`))
	old.Put("b", json.RawMessage(`{"device":"gpu-1","numa":0}`))
	// Force a snapshot at version 1 plus a version 1 log after it.
	old.mu.Lock()
	gen, entries, err := old.rotateLocked()
	old.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := old.writeSnapshot(gen, entries); err != nil {
		t.Fatal(err)
	}
	old.Put("c", json.RawMessage(`{"device":"gpu-2","numa":1}`))
	old.Close()

	// A release that knows only version 1 cannot read a journal upgraded to 3.
	j, err := OpenJournal[devicesV3](dir, devicesSchema(3))
	if err != nil {
		t.Fatal(err)
	}
	got := j.Snapshot()
	if len(got) != 3 || got["c"].Devices[0].Name != "gpu-2" || got["a"].Devices[0].NUMANodes[0] != 1 {
		t.Fatalf("upgraded state %+v", got)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	// Everything on disk is version 3 now.
	files, _ := os.ReadDir(dir)
	for _, f := range files {
		if f.Name() == "lock" {
			continue
		}
		data, _ := os.ReadFile(filepath.Join(dir, f.Name()))
		magic := magicLog
		if f.Name() == "snapshot" {
			magic = magicSnapshot
		}
		if h, _, err := readHeader(f.Name(), data, magic, devicesSchema(3)); err != nil || h.Version != 3 {
			t.Fatalf("%s after upgrade: version %d, %v", f.Name(), h.Version, err)
		}
	}

	// The old release refuses it, and leaves every byte alone.
	before := readDir(t, dir)
	_, err = OpenJournal[json.RawMessage](dir, v1, WithCorruptPolicy(MoveCorruptAside))
	var nv *NewerVersionError
	if !errors.As(err, &nv) || nv.Version != 3 || nv.Supported != 1 {
		t.Fatalf("old release: %v, want *NewerVersionError", err)
	}
	if after := readDir(t, dir); !maps.EqualFunc(before, after, bytes.Equal) {
		t.Fatal("old release changed the newer journal")
	}
}

// writeVersion0Journal lays out, with the frame helpers and no Journal, what
// a writer of version 0 would have left: a snapshot of generation 2 holding
// a, b and x, and log 2 that adds c, deletes b and overwrites x with a value
// only the upgrade can read.
func writeVersion0Journal(t *testing.T, dir string) {
	t.Helper()
	kind := devicesSchema(3).Kind
	n := 3
	snap := appendHeader(nil, magicSnapshot, header{Kind: kind, Version: 0, Generation: 2, Records: &n})
	snap = appendFrame(snap, appendPut(nil, "a", []byte(`{"gpu":"gpu-0","node":1}`)))
	snap = appendFrame(snap, appendPut(nil, "b", []byte(`{"gpu":"gpu-1","node":0}`)))
	snap = appendFrame(snap, appendPut(nil, "x", []byte(`{"gpu":"gpu-9","node":0}`)))
	log := appendHeader(nil, magicLog, header{Kind: kind, Version: 0, Generation: 2})
	log = appendFrame(log, appendPut(nil, "c", []byte(`{"gpu":"gpu-2","node":1}`)))
	log = appendFrame(log, appendPut(appendDelete(nil, "b"), "x", []byte(`{"gpu":"gpu-8","node":1}`)))
	for name, data := range map[string][]byte{snapshotName: snap, logPrefix + "2": log} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestJournalUpgradesVersion0(t *testing.T) {
	dir := t.TempDir()
	writeVersion0Journal(t, dir)
	j, err := OpenJournal[devicesV3](dir, devicesSchema(3))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]devicesV3{
		"a": {Devices: []deviceV3{{Name: "gpu-0", NUMANodes: []int{1}}}},
		"c": {Devices: []deviceV3{{Name: "gpu-2", NUMANodes: []int{1}}}},
		"x": {Devices: []deviceV3{{Name: "gpu-8", NUMANodes: []int{1}}}},
	}
	if got := j.Snapshot(); !reflect.DeepEqual(got, want) {
		t.Fatalf("upgraded state %+v, want %+v", got, want)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	// Rewritten at version 3: a reader without any migration gets the same.
	files, _ := os.ReadDir(dir)
	for _, f := range files {
		if f.Name() == lockName {
			continue
		}
		data, _ := os.ReadFile(filepath.Join(dir, f.Name()))
		magic := magicLog
		if f.Name() == snapshotName {
			magic = magicSnapshot
		}
		if h, _, err := readHeader(f.Name(), data, magic, devicesSchema(3)); err != nil || h.Version != 3 {
			t.Fatalf("%s after upgrade: version %d, %v", f.Name(), h.Version, err)
		}
	}
	current, err := OpenJournal[devicesV3](dir, Schema{Kind: devicesSchema(3).Kind, Version: 3})
	if err != nil {
		t.Fatalf("reader without migrations after the upgrade: %v", err)
	}
	defer current.Close()
	if got := current.Snapshot(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the rewrite %+v, want %+v", got, want)
	}
}

// A journal of version 0 meets a schema without Migrations[0]: older data
// it cannot read, which must stay exactly as it is under every policy.
func TestJournalVersion0WithoutMigration(t *testing.T) {
	for _, policy := range []CorruptPolicy{FailOnCorrupt, MoveCorruptAside} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			writeVersion0Journal(t, dir)
			before := readDir(t, dir)
			s := devicesSchema(3)
			delete(s.Migrations, 0)
			_, err := OpenJournal[devicesV3](dir, s, WithCorruptPolicy(policy))
			var me *MigrationError
			if !errors.As(err, &me) || me.From != 0 || errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want *MigrationError from version 0", err)
			}
			after := readDir(t, dir)
			delete(after, lockName)
			if !maps.EqualFunc(before, after, bytes.Equal) {
				t.Fatal("journal changed by a schema that cannot upgrade it")
			}
		})
	}
}

// A journal header whose version is missing is damage, not version 0, even
// for a schema that upgrades version 0.
func TestJournalHeaderWithoutVersion(t *testing.T) {
	kind := devicesSchema(3).Kind
	for _, hdr := range []string{
		`{"kind":"` + kind + `","generation":1}`,
		`{"kind":"` + kind + `","version":null,"generation":1}`,
		`{"kind":"` + kind + `","version":"1","generation":1}`,
		`{"kind":"` + kind + `","version":-2,"generation":1}`,
	} {
		t.Run(hdr, func(t *testing.T) {
			dir := t.TempDir()
			data := appendFrame(appendFrame([]byte(magicLog), []byte(hdr)), appendPut(nil, "a", []byte(`{"gpu":"gpu-0","node":1}`)))
			path := filepath.Join(dir, logPrefix+"1")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := OpenJournal[devicesV3](dir, devicesSchema(3))
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Path != path || !strings.Contains(ce.Reason, "version") {
				t.Fatalf("got %v, want *CorruptError about the version of %s", err, path)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
				t.Fatal("corrupt log changed under FailOnCorrupt")
			}
		})
	}
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	files, _ := os.ReadDir(dir)
	for _, f := range files {
		out[f.Name()], _ = os.ReadFile(filepath.Join(dir, f.Name()))
	}
	return out
}

func TestJournalValueDecodeFailure(t *testing.T) {
	dir := t.TempDir()
	j, err := OpenJournal[string](dir, claimSchema)
	if err != nil {
		t.Fatal(err)
	}
	j.Put("a", "a string, not a claim")
	j.Close()
	_, err = OpenJournal[claim](dir, claimSchema)
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, `value of key "a" does not decode`) {
		t.Fatalf("got %v", err)
	}
}

// After a failed append the log's state is unknown; the journal must refuse
// every later commit instead of acknowledging changes it may not have
// stored, and a reopen must recover everything acknowledged before.
func TestJournalFailedAppendIsSticky(t *testing.T) {
	dir := t.TempDir()
	j, err := OpenJournal[claim](dir, claimSchema)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, j, 2)
	j.log.Close() // the next write fails with "file already closed"
	err1 := j.Put("lost", claim{})
	if err1 == nil || !strings.Contains(err1.Error(), "reopen to recover") {
		t.Fatalf("Put on a broken log: %v", err1)
	}
	if err2 := j.Put("also-lost", claim{}); err2 == nil || err2.Error() != err1.Error() {
		t.Fatalf("second Put: %v, want the same sticky error", err2)
	}
	if _, ok := j.Snapshot()["lost"]; ok {
		t.Fatal("a failed commit reached the in-memory state")
	}
	j.Close()
	j = openJ(t, dir, claimSchema)
	if got := j.Snapshot(); len(got) != 2 || got["claim-1"].Name != "claim-1" {
		t.Fatalf("after reopen: %v", got)
	}
}

func TestJournalCloseFlushesQueuedCommits(t *testing.T) {
	dir := t.TempDir()
	j, err := OpenJournal[claim](dir, claimSchema)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 32)
	for i := range errs {
		wg.Go(func() { errs[i] = j.Put(fmt.Sprint(i), claim{Name: fmt.Sprint(i)}) })
	}
	closeErr := j.Close()
	wg.Wait()
	if closeErr != nil {
		t.Fatal(closeErr)
	}
	acked := 0
	for _, err := range errs {
		switch {
		case err == nil:
			acked++
		case !errors.Is(err, ErrClosed):
			t.Fatalf("Put racing Close: %v, want nil or ErrClosed", err)
		}
	}
	j = openJ(t, dir, claimSchema)
	if j.Len() != acked {
		t.Fatalf("%d Puts acknowledged, %d stored", acked, j.Len())
	}
}

// flakyValue decodes once and then refuses: a V whose UnmarshalJSON is not
// deterministic, the only way a committed value can stop decoding.
type flakyValue struct{ N int }

var flakyDecodes atomic.Int32

func (f *flakyValue) UnmarshalJSON(b []byte) error {
	if flakyDecodes.Add(1) > 1 {
		return errors.New("refusing the second decode")
	}
	type plain flakyValue
	return json.Unmarshal(b, (*plain)(f))
}

func TestJournalGetReportsValueThatNoLongerDecodes(t *testing.T) {
	flakyDecodes.Store(0)
	j, err := OpenJournal[flakyValue](t.TempDir(), Schema{Kind: "test.dranode.io/flaky", Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Put("k", flakyValue{N: 1}); err != nil {
		t.Fatal(err)
	}
	_, ok, err := j.Get("k")
	if !ok || err == nil || !strings.Contains(err.Error(), `"k"`) || !strings.Contains(err.Error(), "refusing the second decode") {
		t.Fatalf("Get = ok %v, err %v; want an error naming the key and wrapping the decoder's", ok, err)
	}
}
