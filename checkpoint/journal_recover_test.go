package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var recoverSchema = Schema{Kind: "dranode.io/test-recover", Version: 1}

// change is one step of a hand-built record.
type change struct {
	key, value string // value "" is a delete
}

// builtFile is a journal file built byte by byte, with where each record
// starts and ends, so that the expected result of damage at any offset can
// be worked out without the code under test.
type builtFile struct {
	name    string
	data    []byte
	hdrEnd  int        // end of the magic and header frame
	starts  []int      // start of each record frame
	ends    []int      // end of each record frame
	records [][]change // the changes of each record
}

func (f *builtFile) add(changes ...change) {
	var payload []byte
	for _, c := range changes {
		if c.value == "" {
			payload = appendDelete(payload, c.key)
		} else {
			payload = appendPut(payload, c.key, []byte(`"`+c.value+`"`))
		}
	}
	f.starts = append(f.starts, len(f.data))
	f.data = appendFrame(f.data, payload)
	f.ends = append(f.ends, len(f.data))
	f.records = append(f.records, changes)
}

func buildLog(gen uint64, prevSize int64, records ...[]change) *builtFile {
	h := header{Kind: recoverSchema.Kind, Version: 1, Generation: gen}
	if prevSize >= 0 {
		h.PrevLogSize = &prevSize
	}
	f := &builtFile{name: fmt.Sprintf("log.%d", gen), data: appendHeader(nil, magicLog, h)}
	f.hdrEnd = len(f.data)
	for _, r := range records {
		f.add(r...)
	}
	return f
}

func buildSnapshot(gen uint64, puts ...change) *builtFile {
	n := len(puts)
	f := &builtFile{name: snapshotName, data: appendHeader(nil, magicSnapshot, header{Kind: recoverSchema.Kind, Version: 1, Generation: gen, Records: &n})}
	f.hdrEnd = len(f.data)
	for _, p := range puts {
		f.add(p)
	}
	return f
}

// recoverLayouts are small journals: logs only, and a snapshot with logs.
// Every layout's files are in journal order.
func recoverLayouts() map[string][]*builtFile {
	l1 := buildLog(1, -1,
		[]change{{"a", "1"}},
		[]change{{"b", "1"}},
		[]change{{"c", "1"}, {"a", ""}},
		[]change{{"b", "2"}})
	l2 := buildLog(2, int64(len(l1.data)),
		[]change{{"d", "1"}},
		[]change{{"c", ""}},
		[]change{{"e", "1"}})
	snap := buildSnapshot(3, change{"a", "s"}, change{"b", "s"}, change{"c", "s"}, change{"f", "s"})
	l3 := buildLog(3, -1,
		[]change{{"d", "1"}},
		[]change{{"a", ""}},
		[]change{{"b", "2"}})
	l4 := buildLog(4, int64(len(l3.data)),
		[]change{{"e", "1"}},
		[]change{{"g", "1"}})
	return map[string][]*builtFile{
		"logs":          {l1, l2},
		"snapshot+logs": {snap, l3, l4},
	}
}

// expectation is what recovering from one damage must give, worked out from
// the layout alone.
type expectation struct {
	recovered  bool              // damage, not a torn tail (or nothing)
	state      map[string]string // what must be restored
	kept       int
	damageFile string
	damageOff  int // offset in damageFile where the aside copy starts
	unsure     []string
	unreadable int64
	aside      map[string][]byte // aside copy name prefix → content
	lost       bool
}

// expect works out the result of damage to files[fi] that leaves data
// (a flip at off, or a truncation to off bytes).
func expect(files []*builtFile, fi, off int, truncated bool) expectation {
	f := files[fi]
	isSnap := f.name == snapshotName
	lastLog := fi == len(files)-1
	// r: the damaged record, -1 for the header.
	r := -1
	for i := range f.starts {
		if off >= f.starts[i] && off < f.ends[i] {
			r = i
		}
	}
	if off >= f.hdrEnd && r < 0 {
		panic("offset outside the file")
	}
	e := expectation{state: map[string]string{}, aside: map[string][]byte{}}
	apply := func(rec []change, track map[string]bool) {
		for _, c := range rec {
			if c.value == "" {
				delete(e.state, c.key)
			} else {
				e.state[c.key] = c.value
			}
			if track != nil {
				track[c.key] = true
			}
		}
		e.kept++
	}
	// A damaged last record of the last log, or any truncation of the last
	// log after its header, is a torn append: cut, not recovered.
	torn := lastLog && r >= 0 && (truncated || r == len(f.starts)-1)
	if torn {
		for _, file := range files[:fi] {
			for _, rec := range file.records {
				apply(rec, nil)
			}
		}
		for i := 0; i < r; i++ {
			apply(f.records[i], nil)
		}
		return e
	}
	e.recovered = true
	e.damageFile = f.name
	e.damageOff = 0
	if r >= 0 {
		e.damageOff = f.starts[r]
	}
	if truncated {
		e.unreadable = int64(off - e.damageOff)
	} else if r >= 0 {
		e.unreadable = int64(f.ends[r] - f.starts[r])
	} else {
		e.unreadable = int64(f.hdrEnd)
	}
	damaged := f.data
	if truncated {
		damaged = f.data[:off]
	} else {
		damaged = bytes.Clone(f.data)
		damaged[off] ^= 0x01
	}
	if e.damageOff < len(damaged) {
		e.aside[f.name] = damaged[e.damageOff:]
	}
	// Records of the damaged file that are still whole after the damage.
	var after [][]change
	for i := range f.starts {
		if i > r && (!truncated || f.ends[i] <= off) {
			after = append(after, f.records[i])
		}
	}
	// Known to be incomplete: a header that cannot be read, a snapshot
	// (whose header counts its records) missing one, a log shorter than the
	// next log's header says.
	e.lost = r < 0 || isSnap || (truncated && !lastLog)
	if isSnap {
		for i := 0; i < r; i++ {
			apply(f.records[i], nil)
		}
		touched := map[string]bool{}
		for _, file := range files[fi+1:] {
			for _, rec := range file.records {
				apply(rec, touched)
			}
		}
		for _, rec := range after {
			for _, c := range rec {
				if !touched[c.key] {
					e.unsure = append(e.unsure, c.key)
				}
			}
		}
		return e
	}
	for _, file := range files[:fi] {
		for _, rec := range file.records {
			apply(rec, nil)
		}
	}
	for i := 0; i < r; i++ {
		apply(f.records[i], nil)
	}
	for _, rec := range after {
		for _, c := range rec {
			e.unsure = append(e.unsure, c.key)
		}
	}
	for _, file := range files[fi+1:] {
		e.aside[file.name] = file.data
		for _, rec := range file.records {
			for _, c := range rec {
				e.unsure = append(e.unsure, c.key)
			}
		}
	}
	return e
}

// TestJournalRecoversAtEveryOffset flips a byte at, and truncates at, every
// offset of every file of two small journals (logs only; a snapshot and
// logs), and checks against what the layout alone says: every record before
// the damage is restored and nothing else, the remainder is copied aside
// byte for byte, every readable change after the damage is reported and
// none applied, and the damage is reported where it is. Under FailOnCorrupt
// the same damage is a *CorruptError at the same place, with every file
// left as it was.
func TestJournalRecoversAtEveryOffset(t *testing.T) {
	type job struct {
		label     string
		files     []*builtFile
		fi, off   int
		truncated bool
	}
	var jobs []job
	for name, files := range recoverLayouts() {
		for fi, f := range files {
			for off := range len(f.data) {
				if testing.Short() && off%4 != 0 {
					continue // -short: a quarter of the offsets
				}
				for _, truncated := range []bool{false, true} {
					how := "flip"
					if truncated {
						how = "truncate"
					}
					jobs = append(jobs, job{fmt.Sprintf("%s/%s/%s@%d", name, f.name, how, off), files, fi, off, truncated})
				}
			}
		}
	}
	// Each case is a few opens and a dozen fsyncs: run them side by side
	// so that the fsyncs overlap.
	next := make(chan job)
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for jb := range next {
				if err := checkRecovery(t.TempDir(), jb.files, jb.fi, jb.off, jb.truncated); err != nil {
					mu.Lock()
					failures = append(failures, jb.label+": "+err.Error())
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
	t.Logf("%d damaged journals, %d failures", len(jobs), len(failures))
}

// checkRecovery writes the layout into dir with files[fi] damaged, opens it
// under both policies and compares with expect.
func checkRecovery(dir string, files []*builtFile, fi, off int, truncated bool) error {
	for i, f := range files {
		data := f.data
		if i == fi {
			if truncated {
				data = data[:off]
			} else {
				data = bytes.Clone(data)
				data[off] ^= 0x01
			}
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), data, 0o600); err != nil {
			return err
		}
	}
	want := expect(files, fi, off, truncated)

	// FailOnCorrupt: refused where the damage is, nothing changed.
	before, err := dirContents(dir)
	if err != nil {
		return err
	}
	js, err := OpenJournal[string](dir, recoverSchema)
	if want.recovered {
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Path != filepath.Join(dir, want.damageFile) || (want.damageOff > 0 && ce.Offset != int64(want.damageOff)) {
			return fmt.Errorf("FailOnCorrupt: %v, want *CorruptError in %s at %d", err, want.damageFile, want.damageOff)
		}
		after, err := dirContents(dir)
		if err != nil {
			return err
		}
		if !maps.EqualFunc(before, after, bytes.Equal) {
			return fmt.Errorf("FailOnCorrupt changed the directory")
		}
	} else {
		if err != nil {
			return fmt.Errorf("a torn tail must open: %v", err)
		}
		js.Close()
	}

	j, err := OpenJournal[string](dir, recoverSchema, WithCorruptPolicy(MoveCorruptAside))
	if err != nil {
		return fmt.Errorf("MoveCorruptAside: %v", err)
	}
	defer func() { j.Close() }()
	if got := j.Snapshot(); !maps.Equal(got, want.state) {
		return fmt.Errorf("restored %v, want %v", got, want.state)
	}
	rec := j.Recovery()
	if !want.recovered {
		if rec != nil {
			return fmt.Errorf("torn tail reported as damage: %+v", rec)
		}
		return nil
	}
	if rec == nil {
		return fmt.Errorf("damage not reported")
	}
	var unsure []string
	for _, u := range rec.Unsure {
		unsure = append(unsure, u.Key)
		if !u.Delete && (u.ValueErr != nil || u.Value == "") {
			return fmt.Errorf("unsure put of %q: value %q, error %v", u.Key, u.Value, u.ValueErr)
		}
	}
	switch {
	case rec.Damage == nil || rec.Damage.Path != filepath.Join(dir, want.damageFile):
		return fmt.Errorf("damage %v, want in %s", rec.Damage, want.damageFile)
	case rec.Kept != want.kept:
		return fmt.Errorf("kept %d records, want %d", rec.Kept, want.kept)
	case !slices.Equal(unsure, want.unsure):
		return fmt.Errorf("unsure %v, want %v", unsure, want.unsure)
	case rec.Unreadable != want.unreadable:
		return fmt.Errorf("%d bytes unreadable, want %d", rec.Unreadable, want.unreadable)
	case (len(rec.Lost) > 0) != want.lost:
		return fmt.Errorf("lost %q, want some: %v", rec.Lost, want.lost)
	case rec.Complete() != (want.unreadable == 0 && !want.lost):
		return fmt.Errorf("Complete() = %v", rec.Complete())
	case rec.RestoredUnsure != (!rec.Complete() && want.damageFile != snapshotName):
		return fmt.Errorf("RestoredUnsure = %v", rec.RestoredUnsure)
	case len(rec.Aside) != len(want.aside):
		return fmt.Errorf("aside %+v, want copies of %v", rec.Aside, slices.Collect(maps.Keys(want.aside)))
	}
	for _, a := range rec.Aside {
		name := filepath.Base(a.From)
		got, err := os.ReadFile(a.Path)
		if err != nil || !bytes.Equal(got, want.aside[name]) || filepath.Dir(a.Path) != dir || !strings.HasPrefix(filepath.Base(a.Path), name+".corrupt-") || a.Bytes != int64(len(got)) {
			return fmt.Errorf("aside copy %+v of %s (%v): holds %q, want %q", a, name, err, got, want.aside[name])
		}
		if name == want.damageFile && a.Offset != int64(want.damageOff) {
			return fmt.Errorf("aside copy of %s from offset %d, want %d", name, a.Offset, want.damageOff)
		}
	}
	// The journal goes on, and what it restored is now durable as it is:
	// a plain reopen finds no damage and the same state.
	if err := j.Put("z", "new"); err != nil {
		return fmt.Errorf("Put after recovery: %v", err)
	}
	j.Close()
	j, err = OpenJournal[string](dir, recoverSchema)
	if err != nil {
		return fmt.Errorf("reopen after recovery: %v", err)
	}
	want.state["z"] = "new"
	if got := j.Snapshot(); j.Recovery() != nil || !maps.Equal(got, want.state) {
		return fmt.Errorf("reopened %v (recovery %+v), want %v", got, j.Recovery(), want.state)
	}
	return nil
}

// dirContents reads every file in dir but the lock.
func dirContents(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.Name() == lockName {
			continue
		}
		if out[e.Name()], err = os.ReadFile(filepath.Join(dir, e.Name())); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// A header version too large for an int is a newer version like any other:
// refused, never moved or replaced, by File and by Journal, under both
// policies, even when damage elsewhere in the journal would otherwise be
// recovered from.
func TestHugeVersionIsNewerNotCorrupt(t *testing.T) {
	for _, v := range []string{"9223372036854775808", "18446744073709551616", "100000000000000000000000000000"} {
		for _, policy := range []CorruptPolicy{FailOnCorrupt, MoveCorruptAside} {
			t.Run(v+"/"+policy.String(), func(t *testing.T) {
				isNewer := func(what string, err error, path string) {
					t.Helper()
					var nv *NewerVersionError
					if !errors.As(err, &nv) || errors.Is(err, ErrCorrupt) || nv.Stored != v || nv.Path != path || !strings.Contains(err.Error(), "version "+v+",") {
						t.Fatalf("%s: %v, want a *NewerVersionError for version %s of %s", what, err, v, path)
					}
				}
				// File.
				dir := t.TempDir()
				path := filepath.Join(dir, "state")
				s := devicesSchema(3)
				data := appendFrame(appendFrame([]byte(magicFile), []byte(`{"kind":"`+s.Kind+`","version":`+v+`}`)), []byte(`{}`))
				if err := os.WriteFile(path, data, 0o600); err != nil {
					t.Fatal(err)
				}
				f := openT[devicesV3](t, path, s, WithCorruptPolicy(policy))
				_, err := f.Load()
				isNewer("Load", err, path)
				isNewer("Save", f.Save(devicesV3{}), path)

				// Journal: a newer log after a damaged one.
				jdir := filepath.Join(dir, "journal")
				os.Mkdir(jdir, 0o700)
				l1 := buildLog(1, -1, []change{{"a", "1"}}, []change{{"b", "1"}})
				l1.data[l1.starts[0]+frameHdrLen] ^= 1
				l2 := appendFrame(appendFrame([]byte(magicLog), []byte(`{"kind":"`+recoverSchema.Kind+`","version":`+v+`,"generation":2}`)), appendPut(nil, "c", []byte(`"1"`)))
				os.WriteFile(filepath.Join(jdir, "log.1"), l1.data, 0o600)
				os.WriteFile(filepath.Join(jdir, "log.2"), l2, 0o600)
				jbefore, _ := dirContents(jdir)
				_, err = OpenJournal[string](jdir, recoverSchema, WithCorruptPolicy(policy))
				if policy == MoveCorruptAside {
					isNewer("OpenJournal", err, filepath.Join(jdir, "log.2"))
				} else if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("OpenJournal: %v, want the damage in log.1 first", err)
				}

				after, _ := os.ReadFile(path)
				jafter, _ := dirContents(jdir)
				if !bytes.Equal(after, data) || !maps.EqualFunc(jbefore, jafter, bytes.Equal) {
					t.Fatal("a file of a newer version was changed, moved or replaced")
				}
				for _, d := range []string{dir, jdir} {
					if aside, _ := filepath.Glob(filepath.Join(d, "*.corrupt-*")); len(aside) > 0 {
						t.Fatalf("newer version treated as corrupt: %v", aside)
					}
				}
			})
		}
	}
}
