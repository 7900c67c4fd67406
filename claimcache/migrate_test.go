package claimcache

import (
	"encoding/json"
	"errors"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dranode/dranode/checkpoint"
)

var updateTestdata = flag.Bool("claimcache.update-testdata", false, "rewrite testdata/format1-journal from testdata/format1.json")

const (
	format1Source  = "testdata/format1.json"
	format1Journal = "testdata/format1-journal"
)

// TestWriteFormat1Journal makes the hand-made older layout: the records of
// testdata/format1.json (the prototype layout, recordFormat1) written as a
// format 1 journal. It only runs with -claimcache.update-testdata; the bytes
// are committed so that TestUpgradeFormat1 reads what an old agent left
// behind, not what today's code would write.
func TestWriteFormat1Journal(t *testing.T) {
	if !*updateTestdata {
		t.Skip("run with -claimcache.update-testdata to rewrite " + format1Journal)
	}
	src, err := os.ReadFile(format1Source)
	if err != nil {
		t.Fatal(err)
	}
	var recs map[string]recordFormat1
	if err := json.Unmarshal(src, &recs); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(format1Journal); err != nil {
		t.Fatal(err)
	}
	j, err := checkpoint.OpenJournal[recordFormat1](format1Journal, checkpoint.Schema{Kind: schemaKind, Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	var changes []checkpoint.Change[recordFormat1]
	for _, uid := range slices.Sorted(maps.Keys(recs)) {
		changes = append(changes, checkpoint.Change[recordFormat1]{Key: uid, Value: recs[uid]})
	}
	if err := j.Commit(changes...); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	// The lock file is created anew by every open; it is not data.
	os.Remove(filepath.Join(format1Journal, "lock"))
}

// copyDir copies the flat directory src into a new temporary one, so that
// opening it (which upgrades in place) leaves testdata alone.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func TestUpgradeFormat1(t *testing.T) {
	dir := copyDir(t, format1Journal)
	const oldBoot = "7c0a6f2e-aaaa-4d7e-8a1b-000000000001"
	want := []Entry{
		{
			Claim:  ClaimRef{Namespace: "ml", Name: "training-gpus", UID: "2a1e5c9e-0b3f-4d8e-9a61-0c2d5f7e8b01"},
			State:  Prepared,
			BootID: oldBoot,
			Drivers: map[string][]Device{
				"gpu.example.com": {
					{Pool: "node-a", Device: "gpu-0", Requests: []string{"gpus"}, CDIDeviceIDs: []string{"example.com/gpu=gpu-0"}},
					{Pool: "node-a", Device: "gpu-1", Requests: []string{"gpus"}, CDIDeviceIDs: []string{"example.com/gpu=gpu-1"}},
				},
				"nic.example.com": {
					{Pool: "node-a", Device: "eth1", Requests: []string{"rdma"}, CDIDeviceIDs: []string{"example.com/nic=eth1", "example.com/nic=rdma-common"}},
				},
			},
			PodUIDs: []string{"pod-trainer-0", "pod-trainer-1"},
		},
		{
			Claim:  ClaimRef{Namespace: "serving", Name: "inference", UID: "9f8e7d6c-1111-4222-8333-444455556666"},
			State:  Prepared,
			BootID: oldBoot,
		},
	}

	c, rep := openT(t, dir, oldBoot)
	if got := c.List(); !reflect.DeepEqual(got, want) {
		t.Fatalf("upgraded entries:\n got %+v\nwant %+v", got, want)
	}
	if rep.Entries != 2 || rep.RebootDetected || len(rep.Interrupted) != 0 {
		t.Fatalf("report: %+v", rep)
	}
	// The upgraded claims work like any other.
	if _, err := c.StartUnprepare(want[1].Claim.UID); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(want[1].Claim.UID); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	// The journal was rewritten in the current format: a reader that knows
	// only format 2 (no migrations) reads it, in a new boot.
	j, err := checkpoint.OpenJournal[record](dir, checkpoint.Schema{Kind: schemaKind, Version: formatVersion})
	if err != nil {
		t.Fatalf("current-format reader after the upgrade: %v", err)
	}
	if n := j.Len(); n != 1 {
		t.Fatalf("after upgrade and Remove: %d records, want 1", n)
	}
	j.Close()
	c, rep = openT(t, dir, "a-later-boot")
	defer c.Close()
	if !rep.RebootDetected || len(rep.NoLongerPrepared) != 1 || !reflect.DeepEqual(rep.NoLongerPrepared[0].Drivers, want[0].Drivers) {
		t.Fatalf("report in a later boot: %+v", rep)
	}
}

func TestUpgradeRefusesBadFormat1Records(t *testing.T) {
	tests := []struct {
		name, value, say string
	}{
		{"unknown field", `{"claimUID":"u","claimName":"n","namespace":"ns","bootID":"b","colour":"red"}`, "unknown field"},
		{"device without driver", `{"claimUID":"u","claimName":"n","namespace":"ns","bootID":"b","devices":[{"poolName":"p","deviceName":"d"}]}`, "no driver name"},
		{"missing boot ID", `{"claimUID":"u","claimName":"n","namespace":"ns"}`, "empty boot ID"},
		{"key and uid differ", `{"claimUID":"other","claimName":"n","namespace":"ns","bootID":"b"}`, "does not match its key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			j, err := checkpoint.OpenJournal[json.RawMessage](dir, checkpoint.Schema{Kind: schemaKind, Version: 1})
			if err != nil {
				t.Fatal(err)
			}
			if err := j.Put("u", json.RawMessage(tc.value)); err != nil {
				t.Fatal(err)
			}
			j.Close()
			_, _, err = Open(dir, "b")
			if err == nil || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("Open: %v, want an error saying %q", err, tc.say)
			}
			if !errors.Is(err, checkpoint.ErrMigration) && !errors.Is(err, ErrBadRecord) {
				t.Fatalf("Open: %v matches neither checkpoint.ErrMigration nor ErrBadRecord", err)
			}
		})
	}
}

func TestNewerFormatIsRefused(t *testing.T) {
	dir := t.TempDir()
	j, err := checkpoint.OpenJournal[json.RawMessage](dir, checkpoint.Schema{Kind: schemaKind, Version: formatVersion + 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Put("u", json.RawMessage(`{"from":"the future"}`)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	_, _, err = Open(dir, "b")
	var newer *checkpoint.NewerVersionError
	if !errors.As(err, &newer) || newer.Version != formatVersion+1 || newer.Supported != formatVersion {
		t.Fatalf("Open of a newer format: %v, want *checkpoint.NewerVersionError", err)
	}
}
