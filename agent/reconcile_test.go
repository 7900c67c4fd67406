package agent

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/dranode/dranode/agent/config"
	"github.com/dranode/dranode/checkpoint"
	"github.com/dranode/dranode/checkpoint/kubeletcompat"
	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/pluginmgr/plugintest"
)

const journalDriver = "journal.example.com"

// journalPlugin builds testdata/journalplugin, a plugin that appends every
// Prepare and Unprepare it receives to the file named by its callLog.
func journalPlugin(t *testing.T) string {
	t.Helper()
	out, err := plugintest.Build(context.Background(), "", "./testdata/journalplugin", filepath.Join(t.TempDir(), "journalplugin"))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// callLines returns the lines the journal plugin appended to path.
func callLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

// snapshotKeys returns the journal keys of the snapshot's records in file
// order, with each record's frame offset and length.
func snapshotKeys(t *testing.T, data []byte) (keys []string, offs, lens []int) {
	t.Helper()
	off := 8 // magic
	for first := true; off < len(data); first = false {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		payload := data[off+8 : off+8+n]
		if !first {
			klen, w := binary.Uvarint(payload[1:]) // 'P', key length, key, ...
			keys = append(keys, string(payload[1+w:1+w+int(klen)]))
			offs, lens = append(offs, off), append(lens, 8+n)
		}
		off += 8 + n
	}
	return keys, offs, lens
}

// writeDRAManagerState writes the kubelet's DRA checkpoint as its DRA
// manager does: JSON data in a string, with the CRC-32 (IEEE) of it.
func writeDRAManagerState(t *testing.T, path string, claims map[*resourcev1.ResourceClaim][]string) {
	t.Helper()
	type device struct {
		PoolName, DeviceName       string
		RequestNames, CDIDeviceIDs []string
	}
	type claimState struct {
		ClaimUID, ClaimName, Namespace string
		PodUIDs                        map[string]struct{}
		DriverState                    map[string]struct{ Devices []device }
	}
	var list []claimState
	for c, cdiIDs := range claims {
		r := c.Status.Allocation.Devices.Results[0]
		list = append(list, claimState{
			ClaimUID: string(c.UID), ClaimName: c.Name, Namespace: c.Namespace,
			PodUIDs: map[string]struct{}{"pod-" + c.Name: {}},
			DriverState: map[string]struct{ Devices []device }{r.Driver: {Devices: []device{{
				PoolName: r.Pool, DeviceName: r.Device, RequestNames: []string{r.Request}, CDIDeviceIDs: cdiIDs,
			}}}},
		})
	}
	data, err := json.Marshal(map[string]any{"kind": kubeletcompat.DRACheckpointKind, "apiVersion": kubeletcompat.DRACheckpointAPIVersion, "ClaimInfoStateList": list})
	if err != nil {
		t.Fatal(err)
	}
	file, err := json.Marshal(map[string]any{"Data": string(data), "Checksum": crc32.ChecksumIEEE(data)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := kubeletcompat.ReadDRAManagerState(path); err != nil || len(st.Claims) != len(claims) {
		t.Fatalf("the kubelet checkpoint written does not read back: %v, %+v", err, st)
	}
}

// logLines collects an agent's log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) with(substrings ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if !slices.ContainsFunc(substrings, func(s string) bool { return !strings.Contains(line, s) }) {
			out = append(out, line)
		}
	}
	return out
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range fams {
		if fam.GetName() == name && len(fam.GetMetric()) == 1 {
			return fam.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// A claim record damaged on purpose, in front of a real agent start with a
// real plugin process: the claim restored from before the damage is still
// prepared (answered from the record, no plugin call); of the claims whose
// last state the damage hid, the one whose ResourceClaim is gone is
// unprepared through the plugin, the one the kubelet lists is kept, and the
// one the damage lost entirely comes back from the kubelet's checkpoint;
// the kubelet's calls then settle the kept ones.
func TestStartReconcilesADamagedRecord(t *testing.T) {
	e := newTestEnv(t)
	plugin := journalPlugin(t)
	calls := filepath.Join(e.root, "calls")
	e.cfg.Plugins.Drivers = []config.Driver{{Name: "journal", Path: plugin, SHA256: sha256File(t, plugin),
		Config: map[string]any{"driverName": journalDriver, "numDevices": 4, "callLog": calls}}}
	e.cfg.Kubelet.DRAManagerState = filepath.Join(e.root, "kubelet", kubeletcompat.DRAManagerStateFile)

	// First run: four claims prepared as the kubelet would.
	claims := map[string]*resourcev1.ResourceClaim{}
	var all []*resourcev1.ResourceClaim
	for i := range 4 {
		c := claim("default", fmt.Sprintf("claim-%d", i), fmt.Sprintf("00000000-0000-0000-0017-00000000000%d", i), "node-a",
			[2]string{journalDriver, fmt.Sprintf("gpu-%d", i)})
		e.writeClaim(t, c)
		claims[string(c.UID)] = c
		all = append(all, c)
	}
	first := e.start(t, Options{})
	resp := connectKubelet(t, e.cfg, journalDriver).prepare(t, all...)
	cdiIDs := map[string][]string{}
	for _, c := range all {
		cdiIDs[string(c.UID)] = mustPrepared(t, resp, c)
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}

	// Fold the record into a snapshot (one record per claim), then damage
	// the snapshot's second claim record: the first is restored exactly,
	// the second is lost, the last two are readable after the damage.
	dir := e.cfg.ClaimRecordDir()
	dummy := claimcache.ClaimRef{Namespace: "default", Name: "dummy", UID: "00000000-0000-0000-0017-0000000000ff"}
	c, _, err := claimcache.Open(dir, "boot-1", claimcache.WithJournalOptions(checkpoint.WithCompaction(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartPrepare(dummy, ""); err != nil { // the commit that compacts
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if c, _, err = claimcache.Open(dir, "boot-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartUnprepare(dummy.UID); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(dummy.UID); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(dir, "snapshot")
	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatalf("no snapshot after compaction: %v", err)
	}
	keys, offs, lens := snapshotKeys(t, data)
	var order []string // the claims' UIDs in snapshot order
	var lostAt int
	for i, k := range keys {
		if k == dummy.UID {
			continue
		}
		if len(order) == 1 {
			lostAt = offs[i] + lens[i] - 2 // a byte of the value's JSON
		}
		order = append(order, k)
	}
	if len(order) != 4 {
		t.Fatalf("snapshot holds %v, want the four claims", keys)
	}
	restored, lost, gone, listed := claims[order[0]], claims[order[1]], claims[order[2]], claims[order[3]]
	data[lostAt] ^= 0x20
	if err := os.WriteFile(snap, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// The API server (here the claims directory) no longer has one claim;
	// the kubelet's checkpoint lists two.
	if err := os.Remove(filepath.Join(e.claimsDir, gone.Name+".yaml")); err != nil {
		t.Fatal(err)
	}
	writeDRAManagerState(t, e.cfg.Kubelet.DRAManagerState, map[*resourcev1.ResourceClaim][]string{
		lost: cdiIDs[string(lost.UID)], listed: cdiIDs[string(listed.UID)],
	})
	before := len(callLines(t, calls))

	// The agent starts on the damaged record.
	logs := &logLines{}
	reg := prometheus.NewRegistry()
	a := e.start(t, Options{Registry: reg, Logger: funcr.New(func(prefix, args string) {
		logs.mu.Lock()
		logs.lines = append(logs.lines, prefix+" "+args)
		logs.mu.Unlock()
	}, funcr.Options{Verbosity: 2})})

	if got := callLines(t, calls)[before:]; !slices.Equal(got, []string{"unprepare " + string(gone.UID) + " pool-a/" + gone.Status.Allocation.Devices.Results[0].Device}) {
		t.Errorf("plugin calls during start: %q, want exactly the unprepare of the gone claim %s", got, gone.Name)
	}
	if _, err := a.record.Cache().Get(string(gone.UID)); !errors.Is(err, claimcache.ErrNotFound) {
		t.Errorf("the gone claim is still recorded: %v", err)
	}
	if _, err := os.Stat(specPath(e.cfg, journalDriver, string(gone.UID))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the gone claim's CDI spec is still there: %v", err)
	}
	if r, err := a.record.Cache().Get(string(restored.UID)); err != nil || r.State != claimcache.Prepared || r.Uncertain != "" {
		t.Errorf("the claim before the damage: %+v, %v; want it Prepared and certain", r, err)
	}
	for _, c := range []*resourcev1.ResourceClaim{lost, listed} {
		r, err := a.record.Cache().Get(string(c.UID))
		if err != nil || r.Uncertain == "" || r.State != claimcache.PrepareStarted {
			t.Errorf("%s: %+v, %v; want an uncertain PrepareStarted entry", c.Name, r, err)
			continue
		}
		if devs := r.Drivers[journalDriver]; len(devs) != 1 || devs[0].Device != c.Status.Allocation.Devices.Results[0].Device {
			t.Errorf("%s holds %+v, want its device", c.Name, r.Drivers)
		}
	}
	if got := gaugeValue(t, reg, "dranode_record_uncertain_claims"); got != 2 {
		t.Errorf("dranode_record_uncertain_claims = %v, want 2", got)
	}
	// One line for the damage, one per uncertain claim and per outcome.
	for _, want := range [][]string{
		{"Claim record was damaged", snap, "keptRecords"},
		{"Uncertain claim: its last state is unknown", string(gone.UID), gone.Name, "reason", snap},
		{"Uncertain claim: its last state is unknown", string(listed.UID), listed.Name, "reason"},
		{"Uncertain claim unprepared", string(gone.UID)},
		{"Uncertain claim kept", string(listed.UID)},
		{"Uncertain claim recorded from the kubelet's checkpoint", string(lost.UID)},
	} {
		if n := len(logs.with(want...)); n != 1 {
			t.Errorf("%d log lines with %q, want 1:\n%s", n, want, strings.Join(logs.with("Uncertain"), "\n"))
		}
	}

	// The kubelet carries on: the restored claim is answered from the
	// record, the kept one prepared again, the lost one unprepared with
	// the device its checkpoint names.
	k := connectKubelet(t, e.cfg, journalDriver)
	before = len(callLines(t, calls))
	if got := mustPrepared(t, k.prepare(t, restored), restored); !slices.Equal(got, cdiIDs[string(restored.UID)]) {
		t.Errorf("restored claim's CDI IDs %v, want %v", got, cdiIDs[string(restored.UID)])
	}
	if got := callLines(t, calls)[before:]; len(got) != 0 {
		t.Errorf("preparing the restored claim called the plugin: %q", got)
	}
	mustPrepared(t, k.prepare(t, listed), listed)
	if r, err := a.record.Cache().Get(string(listed.UID)); err != nil || r.State != claimcache.Prepared || r.Uncertain != "" {
		t.Errorf("kept claim after the kubelet's prepare: %+v, %v", r, err)
	}
	if res := k.unprepare(t, lost)[string(lost.UID)]; res == nil || res.Error != "" {
		t.Fatalf("unprepare of the lost claim: %+v", res)
	}
	want := []string{
		"prepare " + string(listed.UID) + " pool-a/" + listed.Status.Allocation.Devices.Results[0].Device,
		"unprepare " + string(lost.UID) + " pool-a/" + lost.Status.Allocation.Devices.Results[0].Device,
	}
	if got := callLines(t, calls)[before:]; !slices.Equal(got, want) {
		t.Errorf("plugin calls after start: %q, want %q", got, want)
	}
	if got := gaugeValue(t, reg, "dranode_record_uncertain_claims"); got != 0 {
		t.Errorf("dranode_record_uncertain_claims = %v after the kubelet's calls, want 0", got)
	}
}
