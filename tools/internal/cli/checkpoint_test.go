package cli

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dranode/dranode/checkpoint/kubeletcompat"
	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/tools/internal/ckptfmt"
)

const (
	kubeletTestdata = "../../../checkpoint/kubeletcompat/testdata"
	format0Journal  = "../../../claimcache/testdata/format0-journal"
)

func TestCheckpointInspectKubeletGoldenFiles(t *testing.T) {
	tests := []struct {
		file    string
		format  string
		version string
	}{
		{"dra_manager_state/empty", fmtDRAManager, kubeletcompat.DRACheckpointAPIVersion},
		{"dra_manager_state/one-claim", fmtDRAManager, kubeletcompat.DRACheckpointAPIVersion},
		{"dra_manager_state/several-claims", fmtDRAManager, kubeletcompat.DRACheckpointAPIVersion},
		{"kubelet_internal_checkpoint/per-numa-empty", fmtDeviceManager, kubeletcompat.FormatDevicesPerNUMA.String()},
		{"kubelet_internal_checkpoint/per-numa-several", fmtDeviceManager, kubeletcompat.FormatDevicesPerNUMA.String()},
		// Without entries the two layouts are the same bytes; the reader
		// (and so the tool) calls that the current one.
		{"kubelet_internal_checkpoint/pre-1.20-empty", fmtDeviceManager, kubeletcompat.FormatDevicesPerNUMA.String()},
		{"kubelet_internal_checkpoint/pre-1.20-several", fmtDeviceManager, kubeletcompat.FormatDeviceList.String()},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join(kubeletTestdata, tt.file)
			r := dranodectl(t, "checkpoint", "inspect", path, "-o", "json")
			wantCode(t, r, 0)
			rep := mustJSON[checkpointReport](t, r)
			if rep.Format != tt.format || rep.Version != tt.version || rep.Checksum != "ok" {
				t.Errorf("format %q version %q checksum %q, want %q %q ok", rep.Format, rep.Version, rep.Checksum, tt.format, tt.version)
			}
			// The printed contents are the library's reading of the file.
			switch tt.format {
			case fmtDRAManager:
				want, err := kubeletcompat.ReadDRAManagerState(path)
				if err != nil {
					t.Fatal(err)
				}
				if rep.DRAManager == nil || len(rep.DRAManager.Claims) != len(want.Claims) {
					t.Fatalf("printed %+v, want %d claims", rep.DRAManager, len(want.Claims))
				}
				for i, c := range want.Claims {
					if rep.DRAManager.Claims[i].UID != c.UID {
						t.Errorf("claim %d: uid %s, want %s", i, rep.DRAManager.Claims[i].UID, c.UID)
					}
				}
			case fmtDeviceManager:
				want, err := kubeletcompat.ReadDeviceManagerCheckpoint(path)
				if err != nil {
					t.Fatal(err)
				}
				if rep.DeviceManager == nil || len(rep.DeviceManager.Entries) != len(want.Entries) {
					t.Fatalf("printed %+v, want %d entries", rep.DeviceManager, len(want.Entries))
				}
			}
			// verify prints the verdict, not the contents.
			v := dranodectl(t, "checkpoint", "verify", path, "-o", "json")
			wantCode(t, v, 0)
			if got := mustJSON[checkpointReport](t, v); got.DRAManager != nil || got.DeviceManager != nil || got.Checksum != "ok" {
				t.Errorf("verify printed %+v", got)
			}
		})
	}
}

// corruptCopy writes data with one byte changed at off into a temp file.
func corruptCopy(t *testing.T, src string, mutate func([]byte) []byte) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(dst, mutate(append([]byte(nil), data...)), 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

// flipIn changes one byte inside the first occurrence of marker, keeping the
// file well-formed so that only a checksum can notice.
func flipIn(marker string) func([]byte) []byte {
	return func(b []byte) []byte {
		i := strings.Index(string(b), marker)
		if i < 0 {
			panic("marker not in fixture: " + marker)
		}
		b[i] ^= 0x01
		return b
	}
}

func TestCheckpointCorruptFiles(t *testing.T) {
	tests := []struct {
		name   string
		src    string
		mutate func([]byte) []byte
		want   []string
	}{
		{"dra manager state, data changed", filepath.Join(kubeletTestdata, "dra_manager_state/one-claim"), flipIn("gpu-claim"), []string{"corrupt", "checksum"}},
		{"device manager, data changed", filepath.Join(kubeletTestdata, "kubelet_internal_checkpoint/per-numa-several"), flipIn("trainer"), []string{"corrupt", "checksum"}},
		{"pre-1.20 device manager, truncated", filepath.Join(kubeletTestdata, "kubelet_internal_checkpoint/pre-1.20-several"), func(b []byte) []byte { return b[:len(b)/2] }, []string{"corrupt"}},
		{"dranode journal log, record changed before others", "", flipIn("uid-a"), []string{"corrupt", "checksum mismatch"}},
		{"dranode file, header changed", "../../../checkpoint/testdata/file-v1.ckpt", flipIn("test-devices"), []string{"corrupt", "header"}},
		{"dranode file, trailing frame cut", "../../../checkpoint/testdata/file-v1.ckpt", func(b []byte) []byte { return b[:len(b)-3] }, []string{"corrupt", "past the end"}},
		{"not a checkpoint at all", filepath.Join(kubeletTestdata, "dra_manager_state/one-claim"), func([]byte) []byte { return []byte("hello") }, []string{"unknown checkpoint format"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.src
			if src == "" {
				dir := filepath.Join(t.TempDir(), "claims")
				writeClaimRecord(t, dir, claimcache.ClaimRef{Namespace: "ml", Name: "a", UID: "uid-a"}, claimcache.ClaimRef{Namespace: "ml", Name: "b", UID: "uid-b"})
				src = filepath.Join(dir, "log.1")
			}
			path := corruptCopy(t, src, tt.mutate)
			for _, verb := range []string{"inspect", "verify"} {
				r := dranodectl(t, "checkpoint", verb, path)
				wantCode(t, r, 1, tt.want...)
				if !strings.Contains(r.stderr, path) {
					t.Errorf("%s: error does not name the file:\n%s", verb, r.stderr)
				}
			}
		})
	}
}

// writeClaimRecord records claims with claimcache itself, as the agent does.
func writeClaimRecord(t *testing.T, dir string, claims ...claimcache.ClaimRef) {
	t.Helper()
	c, _, err := claimcache.Open(dir, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range claims {
		if _, err := c.StartPrepare(ref, "pod-"+ref.Name); err != nil {
			t.Fatal(err)
		}
		if _, err := c.FinishPrepare(ref.UID, map[string][]claimcache.Device{
			"gpu.example.com": {{Pool: "node-a", Device: "gpu-0", Requests: []string{"gpu"}, CDIDeviceIDs: []string{"example.com/gpu=" + ref.UID}}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// rewriteHeaderVersion re-frames a journal log's header with another version,
// with a correct checksum: a well-formed file from a newer writer.
func rewriteHeaderVersion(t *testing.T, path string, version int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint32(data[8:])
	var h map[string]any
	if err := json.Unmarshal(data[16:16+n], &h); err != nil {
		t.Fatal(err)
	}
	h["version"] = version
	payload, _ := json.Marshal(h)
	out := append([]byte(nil), data[:8]...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(payload)))
	out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli)))
	out = append(out, payload...)
	out = append(out, data[16+n:]...)
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCheckpointClaimRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "claims")
	refs := []claimcache.ClaimRef{{Namespace: "ml", Name: "a", UID: "uid-a"}, {Namespace: "ml", Name: "b", UID: "uid-b"}}
	writeClaimRecord(t, dir, refs...)

	for _, path := range []string{dir, filepath.Join(dir, "log.1")} {
		r := dranodectl(t, "checkpoint", "inspect", path, "-o", "json")
		wantCode(t, r, 0)
		rep := mustJSON[checkpointReport](t, r)
		if rep.Kind != claimcache.Kind || rep.Version != "1" || rep.Supported != 1 {
			t.Errorf("%s: kind %q version %q supported %d", path, rep.Kind, rep.Version, rep.Supported)
		}
	}
	r := dranodectl(t, "checkpoint", "inspect", dir, "-o", "json")
	rep := mustJSON[checkpointReport](t, r)
	if len(rep.Journal.State) != len(refs) {
		t.Fatalf("state holds %d claims, want %d", len(rep.Journal.State), len(refs))
	}
	for _, ref := range refs {
		var rec struct{ Name, State string }
		if err := json.Unmarshal(rep.Journal.State[ref.UID], &rec); err != nil || rec.Name != ref.Name || rec.State != string(claimcache.Prepared) {
			t.Errorf("claim %s printed as %s (%v)", ref.UID, rep.Journal.State[ref.UID], err)
		}
	}

	t.Run("torn tail is reported, not corruption", func(t *testing.T) {
		torn := filepath.Join(t.TempDir(), "claims")
		copyTree(t, dir, torn)
		f, err := os.OpenFile(filepath.Join(torn, "log.1"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte{40, 0, 0, 0, 1, 2}) // a frame header cut short
		f.Close()
		r := dranodectl(t, "checkpoint", "verify", torn, "-o", "json")
		wantCode(t, r, 0)
		if rep := mustJSON[checkpointReport](t, r); !strings.Contains(rep.Note, "torn") {
			t.Errorf("note %q does not report the torn append", rep.Note)
		}
		// claimcache agrees: the record opens.
		c, _, err := claimcache.Open(torn, "boot-1")
		if err != nil {
			t.Fatalf("claimcache refuses what verify accepted: %v", err)
		}
		c.Close()
	})

	t.Run("newer version", func(t *testing.T) {
		newer := filepath.Join(t.TempDir(), "claims")
		copyTree(t, dir, newer)
		rewriteHeaderVersion(t, filepath.Join(newer, "log.1"), 7)
		for _, verb := range []string{"inspect", "verify"} {
			r := dranodectl(t, "checkpoint", verb, newer)
			wantCode(t, r, 1, "newer than the supported version", "version 7")
		}
		// claimcache agrees it cannot read it.
		if _, _, err := claimcache.Open(newer, "boot-1"); err == nil {
			t.Fatal("claimcache opened a record dranodectl calls newer")
		}
	})
}

func TestCheckpointMigrate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "claims")
	copyTree(t, format0Journal, dir)
	before := treeBytes(t, dir)

	r := dranodectl(t, "checkpoint", "migrate", dir, "-o", "json")
	wantCode(t, r, 0)
	rep := mustJSON[migrateReport](t, r)
	if !rep.Changed || rep.FromVersion != "0" || rep.ToVersion != 1 || rep.Claims != 2 {
		t.Fatalf("migrate reported %+v", rep)
	}
	if !strings.HasPrefix(rep.Backup, dir+".bak-") {
		t.Fatalf("backup %q is not next to %s", rep.Backup, dir)
	}
	if got := treeBytes(t, rep.Backup); !maps.Equal(got, before) {
		t.Errorf("backup differs from the original record")
	}
	j, err := ckptfmt.ReadJournal(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Versions) != 1 || j.Versions[0] != 1 {
		t.Errorf("record holds versions %v after migrate, want [1]", j.Versions)
	}
	c, _, err := claimcache.Open(dir, "any-boot")
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != 2 {
		t.Errorf("migrated record holds %d claims, want 2", c.Len())
	}
	c.Close()
	// The backup is still the old format, readable by the code that wrote it.
	if bj, err := ckptfmt.ReadJournal(context.Background(), rep.Backup); err != nil || bj.Versions[0] != 0 {
		t.Errorf("backup: versions %v, err %v", bj.Versions, err)
	}

	again := mustJSON[migrateReport](t, dranodectl(t, "checkpoint", "migrate", dir, "-o", "json"))
	if again.Changed || again.Backup != "" {
		t.Errorf("second migrate of a current record: %+v, want no change and no backup", again)
	}
}

func TestCheckpointMigrateRefuses(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string
	}{
		{"newer version", func(t *testing.T, dir string) {
			writeClaimRecord(t, dir, claimcache.ClaimRef{Namespace: "ns", Name: "n", UID: "u"})
			rewriteHeaderVersion(t, filepath.Join(dir, "log.1"), 2)
		}, []string{"refused, nothing changed", "newer than the supported version"}},
		{"corrupt record", func(t *testing.T, dir string) {
			copyTree(t, format0Journal, dir)
			b, _ := os.ReadFile(filepath.Join(dir, "log.1"))
			b[len(b)-5] ^= 0xff
			os.WriteFile(filepath.Join(dir, "log.1"), b, 0o600)
			f, _ := os.OpenFile(filepath.Join(dir, "log.1"), os.O_APPEND|os.O_WRONLY, 0)
			// a valid record after the damage: corruption, not a torn tail
			f.Write(mustFrame([]byte("P\x01k\x02{}")))
			f.Close()
		}, []string{"refused, nothing changed", "corrupt"}},
		{"record held by a running writer", func(t *testing.T, dir string) {
			copyTree(t, format0Journal, dir)
			f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
		}, []string{"refused, nothing changed", "stop the agent first"}},
		{"not a dranode record", func(t *testing.T, dir string) {
			os.MkdirAll(dir, 0o755)
			b, _ := os.ReadFile(filepath.Join(kubeletTestdata, "dra_manager_state/one-claim"))
			os.WriteFile(filepath.Join(dir, "dra_manager_state"), b, 0o600)
		}, []string{"not a dranode file dranodectl can migrate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "claims")
			tt.setup(t, dir)
			before := treeBytes(t, dir)
			r := dranodectl(t, "checkpoint", "migrate", dir)
			wantCode(t, r, 1, tt.want...)
			if !maps.Equal(treeBytes(t, dir), before) {
				t.Error("a refused migrate changed the record")
			}
			if m, _ := filepath.Glob(dir + ".bak-*"); len(m) != 0 {
				t.Errorf("a refused migrate left backups %v", m)
			}
		})
	}
}

func mustFrame(payload []byte) []byte {
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)))
	out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli)))
	return append(out, payload...)
}

// TestCheckpointVerifyStateDir: pointed at the agent's stateDir, verify
// names the claim record inside instead of reporting a checksum failure.
func TestCheckpointVerifyStateDir(t *testing.T) {
	state := t.TempDir()
	record := filepath.Join(state, "claims.record")
	cache, _, err := claimcache.Open(record, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cache.StartPrepare(claimcache.ClaimRef{Namespace: "ns", Name: "c", UID: "uid-1"}, "pod-1"); err != nil {
		t.Fatal(err)
	}
	if err := cache.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "handover.lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"verify", "inspect"} {
		r := dranodectl(t, "checkpoint", cmd, state)
		wantCode(t, r, 1, state+" is a directory but not a journal", "it holds the journal "+record+": point at that")
		if strings.Contains(r.stdout+r.stderr, "FAILED") {
			t.Errorf("checkpoint %s %s reports a failed checksum:\n%s%s", cmd, state, r.stdout, r.stderr)
		}
	}
	wantCode(t, dranodectl(t, "checkpoint", "verify", record), 0)
	empty := t.TempDir()
	wantCode(t, dranodectl(t, "checkpoint", "verify", empty), 1, "holds no state file")
}
