package claimcache

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/dranode/dranode/checkpoint"
)

// storedValues reads a closed record's values as tools see them: raw, with
// the format version of their file. A schema whose step from version 0 is
// the identity hands format 0 values over unchanged.
func storedValues(t *testing.T, dir string, version int) map[string]json.RawMessage {
	t.Helper()
	s := checkpoint.Schema{Kind: Kind, Version: FormatVersion}
	if version < FormatVersion {
		s.Migrations = map[int]func(json.RawMessage) (json.RawMessage, error){
			0: func(raw json.RawMessage) (json.RawMessage, error) { return raw, nil },
		}
	}
	j, err := checkpoint.OpenJournal[json.RawMessage](dir, s)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	return j.Snapshot()
}

func TestDecodeEntryAgreesWithOpen(t *testing.T) {
	const boot = "boot-1"
	dir := t.TempDir()
	c, _ := openT(t, dir, boot)
	a := ClaimRef{Namespace: "ns", Name: "a", UID: "uid-a"}
	b := ClaimRef{Namespace: "ns", Name: "b", UID: "uid-b"}
	if _, err := c.StartPrepare(a, "pod-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FinishPrepare(a.UID, map[string][]Device{"gpu.example.com": {
		{Pool: "p", Device: "gpu-0", CDIDeviceIDs: []string{"example.com/gpu=gpu-0"}},
		{Pool: "p", Device: "gpu-2", AdminAccess: true, CDIDeviceIDs: []string{"example.com/gpu=gpu-2"}},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RecordUncertain(b, map[string][]Device{"gpu.example.com": {{Pool: "p", Device: "gpu-1"}}}, "lost in a test"); err != nil {
		t.Fatal(err)
	}
	want := c.List()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	values := storedValues(t, dir, FormatVersion)
	if len(values) != len(want) {
		t.Fatalf("%d stored values, %d entries", len(values), len(want))
	}
	for _, w := range want {
		got, err := DecodeEntry(w.Claim.UID, FormatVersion, values[w.Claim.UID], boot)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("DecodeEntry: %+v, Open: %+v", got, w)
		}
	}
	if got, _ := DecodeEntry(b.UID, FormatVersion, values[b.UID], boot); got.Uncertain != "lost in a test" {
		t.Errorf("uncertain entry decoded with reason %q", got.Uncertain)
	}
	if got, _ := DecodeEntry(a.UID, FormatVersion, values[a.UID], "boot-2"); !got.Stale {
		t.Error("an entry of another boot is not stale")
	}
}

func TestDecodeEntryUpgradesFormat0(t *testing.T) {
	values := storedValues(t, copyDir(t, format0Journal), 0)
	c, _ := openT(t, copyDir(t, format0Journal), "boot")
	defer c.Close()
	for key, raw := range values {
		got, err := DecodeEntry(key, 0, raw, "boot")
		if err != nil {
			t.Fatal(err)
		}
		want, err := c.Get(key)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: DecodeEntry %+v, Open %+v", key, got, want)
		}
	}
}

func TestDecodeEntryRefuses(t *testing.T) {
	good := `{"namespace":"ns","name":"a","uid":"uid-a","state":"Prepared","bootID":"b"}`
	var newer *checkpoint.NewerVersionError
	var mig *checkpoint.MigrationError
	for _, c := range []struct {
		name, key, value string
		version          int
		want             func(error) bool
	}{
		{"newer version", "uid-a", good, FormatVersion + 1, func(err error) bool { return errors.As(err, &newer) && newer.Version == FormatVersion+1 }},
		{"negative version", "uid-a", good, -1, func(err error) bool { return errors.Is(err, ErrBadRecord) }},
		{"format 0 that does not upgrade", "uid-a", `{"unknownField":1}`, 0, func(err error) bool { return errors.As(err, &mig) && mig.From == 0 }},
		{"not JSON", "uid-a", `{`, FormatVersion, func(err error) bool { return errors.Is(err, ErrBadRecord) }},
		{"key is not its UID", "uid-b", good, FormatVersion, func(err error) bool { return errors.Is(err, ErrBadRecord) }},
		{"uncertain but prepared", "uid-a", `{"namespace":"ns","name":"a","uid":"uid-a","state":"Prepared","bootID":"b","uncertain":"x"}`, FormatVersion, func(err error) bool { return errors.Is(err, ErrBadRecord) }},
	} {
		if _, err := DecodeEntry(c.key, c.version, []byte(c.value), "b"); !c.want(err) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if _, err := DecodeEntry("uid-a", FormatVersion, []byte(good), "b"); err != nil {
		t.Errorf("the good value: %v", err)
	}
}
