package claimcache

import (
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
// WithJournalOptions the files are kept aside and the cache starts empty.
func TestCorruptJournal(t *testing.T) {
	dir := t.TempDir()
	c, _ := openT(t, dir, bootOne)
	for i := range 3 {
		if _, err := c.StartPrepare(ClaimRef{Namespace: "ns", Name: fmt.Sprint("c", i), UID: fmt.Sprint("u", i)}, ""); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	logs, _ := filepath.Glob(filepath.Join(dir, "log.*"))
	if len(logs) == 0 {
		t.Fatalf("no journal log in %s", dir)
	}
	data, err := os.ReadFile(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte inside the first claim's record, well before the tail.
	i := strings.Index(string(data), `"u0"`)
	if i < 0 {
		t.Fatalf("claim u0 not found in %s", logs[0])
	}
	data[i+1] ^= 0x20
	if err := os.WriteFile(logs[0], data, 0o600); err != nil {
		t.Fatal(err)
	}

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
	if rep.Entries != 0 || c.Len() != 0 {
		t.Fatalf("after moving aside: %d entries", c.Len())
	}
	aside, _ := filepath.Glob(filepath.Join(dir, "*.corrupt-*"))
	if len(aside) == 0 {
		t.Fatal("corrupt files were not kept aside")
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
