package cli

import (
	"context"
	"encoding/json"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

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

// writeRecordAndKubeletState writes, in dir, an agent's record of listed
// and others (each PrepareStarted) and a kubelet checkpoint listing only
// listed, and returns their paths.
func writeRecordAndKubeletState(t *testing.T, dir string, listed claimcache.ClaimRef, others ...claimcache.ClaimRef) (record, kubelet string) {
	t.Helper()
	record = filepath.Join(dir, "claims.record")
	c, _, err := claimcache.Open(record, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range append([]claimcache.ClaimRef{listed}, others...) {
		if _, err := c.StartPrepare(r, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	kubelet = filepath.Join(dir, "dra_manager_state")
	writeKubeletState(t, kubelet, listed)
	return record, kubelet
}

// record leftovers reads a record and the kubelet's checkpoint and changes
// neither; without an API server the claims the kubelet does not list are
// unchecked, and an unreadable kubelet checkpoint is an error.
func TestRecordLeftovers(t *testing.T) {
	dir := t.TempDir()
	listed := claimcache.ClaimRef{Namespace: "ns", Name: "listed", UID: "uid-listed"}
	other := claimcache.ClaimRef{Namespace: "ns", Name: "other", UID: "uid-other"}
	rec, kubelet := writeRecordAndKubeletState(t, dir, listed, other)
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

// testRecordLeftoversAsksAPIServer classifies every claim the kubelet does
// not list by what the API server holds: no claim, a claim of that name
// under another UID, a claim reserved for no pod (leftovers), a claim in
// use (kept).
func testRecordLeftoversAsksAPIServer(t *testing.T, client kubernetes.Interface, kubeconfig string) {
	ctx := context.Background()
	const ns = "default"
	create := func(name string) *resourcev1.ResourceClaim {
		t.Helper()
		c, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
				Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.example.com"},
			}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	inUse, unreserved := create("in-use"), create("unreserved")
	create("recreated")
	inUse.Status = resourcev1.ResourceClaimStatus{
		Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: "gpu.example.com", Pool: "node-a", Device: "gpu-0",
		}}}},
		ReservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod-1", UID: "pod-uid-1"}},
	}
	if _, err := client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, inUse, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	listed := claimcache.ClaimRef{Namespace: ns, Name: "listed", UID: "uid-listed"}
	refs := map[string]claimcache.ClaimRef{
		"in-use":     {Namespace: ns, Name: "in-use", UID: string(inUse.UID)},
		"unreserved": {Namespace: ns, Name: "unreserved", UID: string(unreserved.UID)},
		"recreated":  {Namespace: ns, Name: "recreated", UID: "uid-before-recreation"},
		"deleted":    {Namespace: ns, Name: "deleted", UID: "uid-deleted"},
	}
	rec, kubelet := writeRecordAndKubeletState(t, t.TempDir(), listed, slices.Collect(maps.Values(refs))...)

	r := dranodectl(t, "record", "leftovers", rec, "--kubelet-checkpoint", kubelet, "--kubeconfig", kubeconfig, "-o", "json")
	wantCode(t, r, 0)
	rep := mustJSON[leftoversReport](t, r)
	got := map[string]string{}
	for _, l := range rep.Leftovers {
		got[l.Name] = l.Reason
	}
	want := map[string]string{
		"unreserved": string(claimcache.ReasonClaimUnreserved),
		"recreated":  string(claimcache.ReasonClaimRecreated),
		"deleted":    string(claimcache.ReasonClaimDeleted),
	}
	if !rep.APIServer || rep.Recorded != 5 || rep.Kept != 2 || len(rep.Unchecked) != 0 || !maps.Equal(got, want) {
		t.Errorf("report %+v: want 5 recorded, 2 kept (listed, in-use), leftovers %v", rep, want)
	}

	wantCode(t, dranodectl(t, "record", "leftovers", rec, "--kubelet-checkpoint", kubelet,
		"--kubeconfig", filepath.Join(t.TempDir(), "none")), 1, "record leftovers: kubeconfig")
}
