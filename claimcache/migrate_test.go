package claimcache

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dranode/dranode/checkpoint"
)

var updateTestdata = flag.Bool("claimcache.update-testdata", false, "rewrite testdata/format0-journal from testdata/format0.json")

const (
	format0Source  = "testdata/format0.json"
	format0Journal = "testdata/format0-journal"
)

// format0Log encodes a journal log of generation 1 whose header says format
// 0, holding one record that puts every value, in key order. checkpoint
// never writes format 0 (its writers start at 1), so this follows the byte
// layout in checkpoint's README by hand, as a tool converting an old
// agent's state would.
func format0Log(values map[string][]byte) []byte {
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	frame := func(dst, payload []byte) []byte {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
		dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(payload, castagnoli))
		return append(dst, payload...)
	}
	var record []byte
	for _, key := range slices.Sorted(maps.Keys(values)) {
		record = append(record, 'P')
		record = binary.AppendUvarint(record, uint64(len(key)))
		record = append(record, key...)
		record = binary.AppendUvarint(record, uint64(len(values[key])))
		record = append(record, values[key]...)
	}
	out := frame([]byte("DRNJLOG1"), []byte(`{"kind":"`+Kind+`","version":0,"generation":1}`))
	return frame(out, record)
}

// writeFormat0Journal makes dir a journal directory holding values at
// format 0.
func writeFormat0Journal(t *testing.T, dir string, values map[string][]byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "log.1"), format0Log(values), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestWriteFormat0Journal makes the hand-made older layout: the records of
// testdata/format0.json (the prototype layout, recordFormat0) written as a
// format 0 journal. It only runs with -claimcache.update-testdata; the bytes
// are committed so that TestUpgradeFormat0 reads what an old agent left
// behind, not what today's code would write.
func TestWriteFormat0Journal(t *testing.T) {
	if !*updateTestdata {
		t.Skip("run with -claimcache.update-testdata to rewrite " + format0Journal)
	}
	src, err := os.ReadFile(format0Source)
	if err != nil {
		t.Fatal(err)
	}
	var recs map[string]recordFormat0
	if err := json.Unmarshal(src, &recs); err != nil {
		t.Fatal(err)
	}
	values := map[string][]byte{}
	for uid, r := range recs {
		if values[uid], err = json.Marshal(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(format0Journal); err != nil {
		t.Fatal(err)
	}
	writeFormat0Journal(t, format0Journal, values)
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

func TestUpgradeFormat0(t *testing.T) {
	dir := copyDir(t, format0Journal)
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

	// The committed journal really is older than what is written now: a
	// reader of the current format without the upgrade refuses it.
	_, err := checkpoint.OpenJournal[record](dir, checkpoint.Schema{Kind: Kind, Version: FormatVersion})
	var me *checkpoint.MigrationError
	if !errors.As(err, &me) || me.From != 0 {
		t.Fatalf("current-format reader without the upgrade, before it: %v, want *checkpoint.MigrationError from format 0", err)
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
	// only format 1 (no migrations) reads it, in a new boot.
	j, err := checkpoint.OpenJournal[record](dir, checkpoint.Schema{Kind: Kind, Version: FormatVersion})
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

func TestUpgradeRefusesBadFormat0Records(t *testing.T) {
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
			writeFormat0Journal(t, dir, map[string][]byte{"u": []byte(tc.value)})
			_, _, err := Open(dir, "b")
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
	j, err := checkpoint.OpenJournal[json.RawMessage](dir, checkpoint.Schema{Kind: Kind, Version: FormatVersion + 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Put("u", json.RawMessage(`{"from":"the future"}`)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	_, _, err = Open(dir, "b")
	var newer *checkpoint.NewerVersionError
	if !errors.As(err, &newer) || newer.Version != FormatVersion+1 || newer.Supported != FormatVersion {
		t.Fatalf("Open of a newer format: %v, want *checkpoint.NewerVersionError", err)
	}
}
