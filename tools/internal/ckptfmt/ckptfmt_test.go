package ckptfmt

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/dranode/dranode/claimcache"
)

func frame(payload string) []byte {
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)))
	out = binary.LittleEndian.AppendUint32(out, crc32.Checksum([]byte(payload), castagnoli))
	return append(out, payload...)
}

func file(magic string, frames ...string) []byte {
	out := []byte(magic)
	for _, f := range frames {
		out = append(out, frame(f)...)
	}
	return out
}

func TestParse(t *testing.T) {
	const hdr = `{"kind":"k","version":1}`
	put := "P\x01a\x02{}"
	tests := []struct {
		name     string
		data     []byte
		wantErr  error
		records  int
		tornTail bool
	}{
		{"file", file("DRNFILE1", hdr, `{"x":1}`), nil, 1, false},
		{"file from the checkpoint module", mustRead(t, "../../../checkpoint/testdata/file-v1.ckpt"), nil, 1, false},
		{"file without document", file("DRNFILE1", hdr), ErrCorrupt, 0, false},
		{"file with two documents", file("DRNFILE1", hdr, "{}", "{}"), ErrCorrupt, 2, false},
		{"log", file("DRNJLOG1", `{"kind":"k","version":1,"generation":1}`, put, put+"D\x01a"), nil, 2, false},
		{"log with torn tail", append(file("DRNJLOG1", hdr, put), 9, 0, 0, 0, 1), nil, 1, true},
		{"log with damage before a good record", append(append(file("DRNJLOG1", hdr, put), []byte{3, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c'}...), frame(put)...), ErrCorrupt, 1, false},
		{"snapshot", file("DRNSNAP1", `{"kind":"k","version":1,"generation":3,"records":1}`, put), nil, 1, false},
		{"snapshot with a missing record", file("DRNSNAP1", `{"kind":"k","version":1,"generation":3,"records":2}`, put), ErrCorrupt, 1, false},
		{"header without version", file("DRNFILE1", `{"kind":"k"}`, "{}"), ErrCorrupt, 0, false},
		{"header without kind", file("DRNFILE1", `{"version":1}`, "{}"), ErrCorrupt, 0, false},
		{"negative version", file("DRNFILE1", `{"kind":"k","version":-1}`, "{}"), ErrCorrupt, 0, false},
		{"unknown change tag", file("DRNJLOG1", hdr, "X\x01a"), ErrCorrupt, 0, false},
		{"value not JSON", file("DRNJLOG1", hdr, "P\x01a\x01{"), ErrCorrupt, 0, false},
		{"key past the record", file("DRNJLOG1", hdr, "P\x09a"), ErrCorrupt, 0, false},
		{"short magic", []byte("DRN"), ErrCorrupt, 0, false},
		{"kubelet JSON", mustRead(t, "../../../checkpoint/kubeletcompat/testdata/dra_manager_state/one-claim"), ErrNotDranode, 0, false},
		{"empty", nil, ErrNotDranode, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse(tt.data)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if errors.Is(err, ErrNotDranode) {
				if p != nil {
					t.Errorf("a non-dranode file returned %+v", p)
				}
				return
			}
			var ce *CorruptError
			if err != nil && !errors.As(err, &ce) {
				t.Errorf("%T is not a *CorruptError", err)
			}
			if len(p.Records) != tt.records || (p.TornTail != nil) != tt.tornTail {
				t.Errorf("%d records, torn tail %v; want %d, %v", len(p.Records), p.TornTail, tt.records, tt.tornTail)
			}
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ReadJournal replays a record claimcache wrote to the same state claimcache
// restores from it.
func TestReadJournalAgreesWithClaimcache(t *testing.T) {
	dir := t.TempDir()
	c, _, err := claimcache.Open(dir, "boot")
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"u1", "u2", "u3"} {
		if _, err := c.StartPrepare(claimcache.ClaimRef{Namespace: "ns", Name: "n-" + uid, UID: uid}, "pod"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.StartUnprepare("u2"); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove("u2"); err != nil {
		t.Fatal(err)
	}
	want := c.List()
	c.Close()

	j, err := ReadJournal(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if j.Kind != claimcache.Kind || len(j.State) != len(want) {
		t.Fatalf("kind %q, %d keys; want %d", j.Kind, len(j.State), len(want))
	}
	for _, e := range want {
		var rec struct{ Name, State string }
		if err := json.Unmarshal(j.State[e.Claim.UID], &rec); err != nil || rec.Name != e.Claim.Name || rec.State != string(e.State) {
			t.Errorf("%s: %s (%v), want %s %s", e.Claim.UID, j.State[e.Claim.UID], err, e.Claim.Name, e.State)
		}
	}
}

func TestReadJournalRejects(t *testing.T) {
	hdr := func(gen int) string { return `{"kind":"k","version":1,"generation":` + string(rune('0'+gen)) + `}` }
	put := "P\x01a\x02{}"
	tests := []struct {
		name  string
		files map[string][]byte
		want  error
	}{
		{"gap between logs", map[string][]byte{"log.1": file("DRNJLOG1", hdr(1), put), "log.3": file("DRNJLOG1", hdr(3), put)}, ErrCorrupt},
		{"two kinds", map[string][]byte{"log.1": file("DRNJLOG1", hdr(1), put), "log.2": file("DRNJLOG1", `{"kind":"other","version":1}`, put)}, ErrCorrupt},
		{"torn tail before the last log", map[string][]byte{"log.1": append(file("DRNJLOG1", hdr(1), put), 1, 2), "log.2": file("DRNJLOG1", hdr(2), put)}, ErrCorrupt},
		{"a log where the snapshot belongs", map[string][]byte{"snapshot": file("DRNJLOG1", hdr(1), put)}, ErrCorrupt},
		{"no journal files", map[string][]byte{"unrelated": []byte("x")}, ErrNotDranode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, b := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := ReadJournal(context.Background(), dir)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}
