package cli

import (
	"encoding/json"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/dranode/dranode/claimcache"
)

// writeKubeletState writes a kubelet DRA checkpoint listing the claims.
func writeKubeletState(t *testing.T, path string, claims ...claimcache.ClaimRef) {
	t.Helper()
	var list []map[string]any
	for _, c := range claims {
		list = append(list, map[string]any{"ClaimUID": c.UID, "ClaimName": c.Name, "Namespace": c.Namespace,
			"PodUIDs": map[string]any{"pod-1": struct{}{}}, "DriverState": map[string]any{}})
	}
	data, err := json.Marshal(map[string]any{"kind": "DRACheckpoint", "apiVersion": "checkpoint.dra.kubelet.k8s.io/v1", "ClaimInfoStateList": list})
	if err != nil {
		t.Fatal(err)
	}
	file, err := json.Marshal(map[string]any{"Data": string(data), "Checksum": crc32.ChecksumIEEE(data)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
}

// record leftovers reads a record and the kubelet's checkpoint and changes
// neither; without an API server the claims the kubelet does not list are
// unchecked, and an unreadable kubelet checkpoint is an error.
func TestRecordLeftovers(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "claims.record")
	c, _, err := claimcache.Open(rec, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	listed := claimcache.ClaimRef{Namespace: "ns", Name: "listed", UID: "uid-listed"}
	other := claimcache.ClaimRef{Namespace: "ns", Name: "other", UID: "uid-other"}
	for _, r := range []claimcache.ClaimRef{listed, other} {
		if _, err := c.StartPrepare(r, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	kubelet := filepath.Join(dir, "dra_manager_state")
	writeKubeletState(t, kubelet, listed)
	before := treeBytes(t, dir)

	r := dranodectl(t, "record", "leftovers", rec, "--kubelet-checkpoint", kubelet, "-o", "json")
	wantCode(t, r, 0)
	rep := mustJSON[leftoversReport](t, r)
	if rep.Recorded != 2 || rep.Kept != 1 || len(rep.Leftovers) != 0 || len(rep.Unchecked) != 1 ||
		rep.Unchecked[0].UID != other.UID || rep.Unchecked[0].Error != errNoAPIServer.Error() {
		t.Errorf("report %+v: want 2 recorded, 1 kept, %s unchecked without an API server", rep, other.UID)
	}
	r = dranodectl(t, "record", "leftovers", rec, "--kubelet-checkpoint", kubelet)
	wantCode(t, r, 0)

	if err := os.WriteFile(kubelet, []byte(`{"Data":"{}","Checksum":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	wantCode(t, dranodectl(t, "record", "leftovers", rec, "--kubelet-checkpoint", kubelet), 1, "sweeps nothing")
	wantCode(t, dranodectl(t, "record", "leftovers", rec, "--kubelet-checkpoint", filepath.Join(dir, "missing")), 1, "sweeps nothing")
	delete(before, "dra_manager_state")
	after := treeBytes(t, dir)
	delete(after, "dra_manager_state")
	for p, b := range before {
		if after[p] != b {
			t.Errorf("%s changed", p)
		}
	}
	if len(after) != len(before) {
		t.Errorf("files before %d, after %d", len(before), len(after))
	}
}
