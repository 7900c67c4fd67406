package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"testing"
)

// Seeds: the committed fixtures, their corruptions, and what the fuzzer
// stores under testdata/fuzz/<target>/.
func addFileSeeds(f *testing.F) {
	fixtures, _ := filepath.Glob(filepath.Join("testdata", "*.ckpt"))
	for _, p := range fixtures {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, c := range corruptions() {
		f.Add(c.data)
	}
}

func FuzzDecodeFile(f *testing.F) {
	addFileSeeds(f)
	s := devicesSchema(3)
	f.Fuzz(func(t *testing.T, data []byte) {
		version, payload, err := decodeFile("fuzz", data, s)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNewerVersion) {
				t.Fatalf("error of unexpected type %T: %v", err, err)
			}
			return
		}
		if version < 0 || version > s.Version || !json.Valid(payload) {
			t.Fatalf("accepted version %d payload %q", version, payload)
		}
		// Whatever decodes must be exactly what the encoder would
		// write for that content, up to the header's JSON spelling.
		_, off, _ := readHeader("fuzz", data, magicFile, s)
		if !bytes.Equal(data[off:], appendFrame(nil, payload)) {
			t.Fatalf("payload frame does not re-encode to the same bytes")
		}
		// The typed path must not panic either.
		file := &File[devicesV3]{path: "fuzz", schema: s}
		_, _ = file.decodePayload(version, payload)
	})
}

func FuzzParseRecord(f *testing.F) {
	f.Add(appendPut(nil, "claim-1", []byte(`{"a":1}`)))
	f.Add(appendDelete(appendPut(nil, "k", []byte(`1`)), "k"))
	f.Add([]byte{opPut, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{opDelete, 0})
	f.Fuzz(func(t *testing.T, payload []byte) {
		var again []byte
		err := parseRecord(payload, func(key, value []byte, del bool) {
			if del {
				again = appendDelete(again, string(key))
			} else {
				again = appendPut(again, string(key), value)
			}
		})
		if err != nil {
			if !errors.Is(err, errRecord) {
				t.Fatalf("error of unexpected type: %v", err)
			}
			return
		}
		// Uvarints have more than one spelling; compare by parsing the
		// canonical form again.
		var third []byte
		if err := parseRecord(again, func(key, value []byte, del bool) {
			if del {
				third = appendDelete(third, string(key))
			} else {
				third = appendPut(third, string(key), value)
			}
		}); err != nil || !bytes.Equal(again, third) {
			t.Fatalf("record does not round-trip: %v", err)
		}
	})
}

// FuzzJournalRestore feeds arbitrary bytes as the journal's log: opening
// must never panic, must fail only with a typed error, and whatever it
// restores must be stable: a second open sees the same state.
func FuzzJournalRestore(f *testing.F) {
	s := Schema{Kind: "dranode.io/fuzz", Version: 1}
	log := appendHeader(nil, magicLog, header{Kind: s.Kind, Version: 1, Generation: 1})
	for _, rec := range [][]byte{
		appendPut(nil, "a", []byte(`"x"`)),
		appendDelete(appendPut(nil, "b", []byte(`"y"`)), "a"),
	} {
		log = appendFrame(log, rec)
	}
	f.Add(log)
	f.Add(log[:len(log)-1])
	f.Add(append(bytes.Clone(log), make([]byte, 40)...))
	f.Add([]byte(magicLog))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "log.1"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		j, err := OpenJournal[string](dir, s)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNewerVersion) {
				t.Fatalf("error of unexpected type %T: %v", err, err)
			}
			return
		}
		first := j.Snapshot()
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		j, err = OpenJournal[string](dir, s)
		if err != nil {
			t.Fatalf("second open after a successful one: %v", err)
		}
		defer j.Close()
		if second := j.Snapshot(); !maps.Equal(first, second) {
			t.Fatalf("state changed between opens: %v then %v", first, second)
		}
	})
}

// FuzzJournalSnapshot feeds arbitrary bytes as the snapshot (with an empty
// log of its generation): never a panic, only typed errors, and a stable
// result.
func FuzzJournalSnapshot(f *testing.F) {
	s := Schema{Kind: "dranode.io/fuzz", Version: 1}
	good := func(records ...[]byte) []byte {
		n := len(records)
		b := appendHeader(nil, magicSnapshot, header{Kind: s.Kind, Version: 1, Generation: 2, Records: &n})
		for _, r := range records {
			b = appendFrame(b, r)
		}
		return b
	}
	f.Add(good(appendPut(nil, "a", []byte(`"x"`)), appendPut(nil, "b", []byte(`"y"`))))
	f.Add(good())
	f.Add(good(appendDelete(nil, "a")))
	snap := good(appendPut(nil, "a", []byte(`"x"`)))
	f.Add(snap[:len(snap)-1])
	log := appendHeader(nil, magicLog, header{Kind: s.Kind, Version: 1, Generation: 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "snapshot"), data, 0o600)
		os.WriteFile(filepath.Join(dir, "log.2"), log, 0o600)
		j, err := OpenJournal[string](dir, s)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNewerVersion) {
				t.Fatalf("error of unexpected type %T: %v", err, err)
			}
			return
		}
		first := j.Snapshot()
		j.Close()
		j, err = OpenJournal[string](dir, s)
		if err != nil {
			t.Fatalf("second open after a successful one: %v", err)
		}
		defer j.Close()
		if second := j.Snapshot(); !maps.Equal(first, second) {
			t.Fatalf("state changed between opens: %v then %v", first, second)
		}
	})
}

// FuzzJournalRecover feeds arbitrary bytes as the first of two logs (so
// that damage in it is never a torn tail) and opens the journal under
// MoveCorruptAside: never a panic, only typed errors; after a recovery the
// aside copies hold exactly the bytes from the damage on, nothing of the
// second log is applied, and a plain reopen finds the same state and no
// damage.
func FuzzJournalRecover(f *testing.F) {
	s := Schema{Kind: "dranode.io/fuzz", Version: 1}
	log := appendHeader(nil, magicLog, header{Kind: s.Kind, Version: 1, Generation: 1})
	for _, rec := range [][]byte{
		appendPut(nil, "a", []byte(`"x"`)),
		appendDelete(appendPut(nil, "b", []byte(`"y"`)), "a"),
		appendPut(nil, "c", []byte(`"z"`)),
	} {
		log = appendFrame(log, rec)
	}
	f.Add(log)
	flipped := bytes.Clone(log)
	flipped[len(flipped)-12] ^= 1
	f.Add(flipped)
	f.Add(log[:len(log)-5])
	f.Add(log[:30])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		size := int64(len(data))
		second := appendFrame(appendHeader(nil, magicLog, header{Kind: s.Kind, Version: 1, Generation: 2, PrevLogSize: &size}), appendPut(nil, "second", []byte(`"2"`)))
		os.WriteFile(filepath.Join(dir, "log.1"), data, 0o600)
		os.WriteFile(filepath.Join(dir, "log.2"), second, 0o600)
		j, err := OpenJournal[string](dir, s, WithCorruptPolicy(MoveCorruptAside))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNewerVersion) {
				t.Fatalf("error of unexpected type %T: %v", err, err)
			}
			return
		}
		first := j.Snapshot()
		if rec := j.Recovery(); rec != nil {
			if _, ok := first["second"]; ok {
				t.Fatalf("a change after the damage was applied: %v", first)
			}
			for _, a := range rec.Aside {
				orig := data
				if filepath.Base(a.From) == "log.2" {
					orig = second
				}
				got, err := os.ReadFile(a.Path)
				if err != nil || a.Offset < 0 || a.Offset > int64(len(orig)) || !bytes.Equal(got, orig[a.Offset:]) {
					t.Fatalf("aside copy %+v does not hold the remainder: %v", a, err)
				}
			}
		} else if first["second"] != "2" {
			t.Fatalf("an intact journal lost the second log: %v", first)
		}
		j.Close()
		j, err = OpenJournal[string](dir, s)
		if err != nil {
			t.Fatalf("reopen after a successful open: %v", err)
		}
		defer j.Close()
		if second := j.Snapshot(); !maps.Equal(first, second) || j.Recovery() != nil {
			t.Fatalf("state changed between opens: %v then %v", first, second)
		}
	})
}
