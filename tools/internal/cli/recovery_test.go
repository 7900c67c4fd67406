package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/dranode/dranode/checkpoint"
	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/tools/internal/ckptfmt"
)

// A claim record damaged in its log, shown before the agent's recovery (what
// it will do, found on a copy) and after it (the copy aside, the uncertain
// entries), in every output format; the record is made, damaged and
// recovered by claimcache itself.
func TestCheckpointInspectShowsRecovery(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "claims")
	refs := []claimcache.ClaimRef{{Namespace: "ml", Name: "a", UID: "uid-a"}, {Namespace: "ml", Name: "b", UID: "uid-b"}, {Namespace: "ml", Name: "c", UID: "uid-c"}}
	writeClaimRecord(t, dir, refs...) // six records: start and finish of a, b, c
	logPath := filepath.Join(dir, "log.1")
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := ckptfmt.Parse(data)
	if err != nil || len(parsed.Records) != 6 {
		t.Fatalf("log.1: %d records, %v; want 6", len(parsed.Records), err)
	}
	// Damage b's finish: a's records and b's start are kept, c's are still
	// readable after the damage.
	bad := parsed.Records[3].Offset
	frameLen := parsed.Records[4].Offset - bad
	data[bad+12] ^= 0x40
	if err := os.WriteFile(logPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	before := treeBytes(t, dir)

	r := dranodectl(t, "checkpoint", "inspect", dir, "-o", "json")
	wantCode(t, r, 1, "corrupt", logPath)
	rep := mustJSON[checkpointReport](t, r)
	if rep.Recovery == nil || rep.Recovery.Damage == nil {
		t.Fatalf("no damage reported:\n%s", r.stdout)
	}
	d := rep.Recovery.Damage
	if d.File != logPath || d.Offset != bad || d.KeptRecords != 3 || d.UnreadableBytes != frameLen || !d.Unknown {
		t.Errorf("damage %+v, want %s at %d, 3 records kept, %d bytes unreadable, unknown changes", d, logPath, bad, frameLen)
	}
	// Unreadable bytes after restored records: every claim is uncertain.
	var uids []string
	for _, u := range rep.Recovery.Uncertain {
		uids = append(uids, u.UID)
		// b's devices were in the damaged record: nothing names them.
		wantDevices := []string{"gpu.example.com node-a/gpu-0"}
		if u.UID == "uid-b" {
			wantDevices = nil
		}
		if !strings.Contains(u.Reason, logPath) || !reflect.DeepEqual(u.Devices, wantDevices) {
			t.Errorf("uncertain %+v: want the reason to name %s, and devices %v", u, logPath, wantDevices)
		}
	}
	if !reflect.DeepEqual(uids, []string{"uid-a", "uid-b", "uid-c"}) {
		t.Errorf("uncertain claims %v, want all three", uids)
	}
	if after := treeBytes(t, dir); !reflect.DeepEqual(before, after) {
		t.Fatal("inspect changed the record's directory")
	}
	dryRun := rep.Recovery.Uncertain

	r = dranodectl(t, "checkpoint", "inspect", dir)
	t.Logf("before recovery:\n%s", r.stdout)
	for _, want := range []string{"DAMAGE", logPath, "RECORDS KEPT", "UNREADABLE BYTES", "UNCERTAIN CLAIM", "ml/c"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table does not show %q:\n%s", want, r.stdout)
		}
	}

	// The agent starts: claimcache recovers the record for real.
	c, report, err := claimcache.Open(dir, "boot-1", claimcache.WithJournalOptions(checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside)))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if report.Damage == nil || len(report.Damage.Aside) != 1 {
		t.Fatalf("claimcache recovered %+v", report.Damage)
	}

	for _, format := range []string{"json", "yaml"} {
		r = dranodectl(t, "checkpoint", "inspect", dir, "-o", format)
		wantCode(t, r, 0)
		var rep checkpointReport
		if err := yaml.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("%s output: %v\n%s", format, err, r.stdout)
		}
		rec := rep.Recovery
		if rec == nil || rec.Damage != nil || len(rec.Aside) != 1 {
			t.Fatalf("%s: recovery %+v, want one aside copy and no damage now", format, rec)
		}
		a := rec.Aside[0]
		if want := filepath.Base(report.Damage.Aside[0].Path); a.Name != want || a.From != "log.1" || a.Bytes != int64(len(data))-bad || a.Time.IsZero() {
			t.Errorf("%s: aside %+v, want %s, %d bytes of log.1", format, a, want, int64(len(data))-bad)
		}
		if !reflect.DeepEqual(rec.Uncertain, dryRun) {
			t.Errorf("%s: uncertain entries after recovery\n%+v\nthe dry run said\n%+v", format, rec.Uncertain, dryRun)
		}
	}
	r = dranodectl(t, "checkpoint", "inspect", dir)
	t.Logf("after recovery:\n%s", r.stdout)
	for _, want := range []string{"ASIDE", filepath.Base(report.Damage.Aside[0].Path), "UNCERTAIN CLAIM", "uid-b", "damaged at " + logPath} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table after recovery does not show %q:\n%s", want, r.stdout)
		}
	}

	// Settled entries are no longer listed.
	c, _, err = claimcache.Open(dir, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		if _, err := c.StartUnprepare(ref.UID); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	rep = mustJSON[checkpointReport](t, dranodectl(t, "checkpoint", "inspect", dir, "-o", "json"))
	if rep.Recovery == nil || len(rep.Recovery.Uncertain) != 0 || len(rep.Recovery.Aside) != 1 {
		t.Errorf("after settling: %+v, want only the aside copy", rep.Recovery)
	}
}
