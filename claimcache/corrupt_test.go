package claimcache

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dranode/dranode/checkpoint"
)

// TestCorruptJournal: damage in the middle of the record is refused by
// default (nothing is silently dropped); with MoveCorruptAside passed through
// WithJournalOptions what follows the damage is kept aside, and the claims
// it names are recorded as uncertain and reported.
func TestCorruptJournal(t *testing.T) {
	dir := t.TempDir()
	c, _ := openT(t, dir, bootOne)
	for i := range 3 {
		if _, err := c.StartPrepare(ClaimRef{Namespace: "ns", Name: fmt.Sprint("c", i), UID: fmt.Sprint("u", i)}, ""); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	// Flip a byte inside the first claim's record, well before the tail.
	logs, data := damageLog(t, dir, `"u0"`)

	if _, _, err := Open(dir, bootOne); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("Open of a corrupt record: %v, want checkpoint.ErrCorrupt", err)
	}
	if after, _ := os.ReadFile(logs[0]); string(after) != string(data) {
		t.Fatal("a refused Open changed the corrupt file")
	}
	c, rep, err := Open(dir, bootOne, WithJournalOptions(checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside)))
	if err != nil {
		t.Fatalf("Open with MoveCorruptAside: %v", err)
	}
	defer c.Close()
	// u0's record is damaged: nothing names it any more, which Unknown
	// says; u1 and u2 come after the damage: recorded, but uncertain.
	d := rep.Damage
	if d == nil || d.Cause == nil || d.Cause.Path != logs[0] || !d.Unknown || d.UnreadableBytes == 0 || d.KeptRecords != 0 {
		t.Fatalf("Damage %+v, want the damage in %s, nothing kept, some bytes unreadable", d, logs[0])
	}
	if len(d.Uncertain) != 2 || d.Uncertain[0].Claim.UID != "u1" || d.Uncertain[1].Claim.UID != "u2" || !d.Uncertain[0].Recorded || d.Uncertain[0].LastSeen != string(PrepareStarted) {
		t.Fatalf("uncertain claims %+v, want u1 and u2, recorded", d.Uncertain)
	}
	if len(rep.Uncertain) != 2 || len(rep.Interrupted) != 0 || c.Len() != 2 {
		t.Fatalf("report %+v, want u1 and u2 uncertain and not interrupted", rep)
	}
	for _, e := range c.List() {
		if e.State != PrepareStarted || e.Uncertain == "" || e.Claim.Name == "" {
			t.Fatalf("entry %+v, want an uncertain PrepareStarted entry", e)
		}
	}
	if len(d.Aside) != 1 {
		t.Fatalf("aside copies %+v, want one", d.Aside)
	}
	if aside, err := os.ReadFile(d.Aside[0].Path); err != nil || !bytes.Equal(aside, data[d.Aside[0].Offset:]) {
		t.Fatalf("aside copy does not hold the remainder: %v", err)
	}
}

// TestOpenRefusesBadRecords: records that decode but that no Cache could
// have written are refused with ErrBadRecord, naming the record, rather than
// dropped.
func TestOpenRefusesBadRecords(t *testing.T) {
	good := func(uid, name string) record {
		return record{Namespace: "ns", Name: name, UID: uid, State: Prepared, BootID: bootOne}
	}
	tests := []struct {
		name    string
		records map[string]record
		say     string
	}{
		{"two UIDs one name", map[string]record{"u1": good("u1", "same"), "u2": good("u2", "same")}, "both named ns/same"},
		{"unknown state", map[string]record{"u1": func() record { r := good("u1", "a"); r.State = "Frozen"; return r }()}, `unknown state "Frozen"`},
		{"key and UID differ", map[string]record{"u1": good("u9", "a")}, "does not match its key"},
		{"unsorted pods", map[string]record{"u1": func() record { r := good("u1", "a"); r.PodUIDs = []string{"b", "a"}; return r }()}, "not sorted"},
		{"device without name", map[string]record{"u1": func() record {
			r := good("u1", "a")
			r.Drivers = []driverRecord{{Driver: "d", Devices: []deviceRecord{{Pool: "p"}}}}
			return r
		}()}, "device without pool or name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			j, err := checkpoint.OpenJournal[record](dir, storeSchema())
			if err != nil {
				t.Fatal(err)
			}
			for k, r := range tc.records {
				if err := j.Put(k, r); err != nil {
					t.Fatal(err)
				}
			}
			j.Close()
			_, _, err = Open(dir, bootOne)
			if !errors.Is(err, ErrBadRecord) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("Open: %v, want ErrBadRecord saying %q", err, tc.say)
			}
			// The refusal released the directory.
			j, err = checkpoint.OpenJournal[record](dir, storeSchema())
			if err != nil {
				t.Fatalf("directory still locked after the refused Open: %v", err)
			}
			j.Close()
		})
	}
}

// damageLog flips a byte inside the first occurrence of needle in the
// record's first log, and returns the logs and the damaged file's bytes.
func damageLog(t *testing.T, dir, needle string) (logs []string, data []byte) {
	t.Helper()
	logs, _ = filepath.Glob(filepath.Join(dir, "log.*"))
	if len(logs) == 0 {
		t.Fatalf("no journal log in %s", dir)
	}
	data, err := os.ReadFile(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(data), needle)
	if i < 0 {
		t.Fatalf("%s not found in %s", needle, logs[0])
	}
	data[i+1] ^= 0x20
	if err := os.WriteFile(logs[0], data, 0o600); err != nil {
		t.Fatal(err)
	}
	return logs, data
}
