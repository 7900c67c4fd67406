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
