package fleet

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A log as the API server writes it: a watch that started and ended, one
// still open, one refused, a get and a write of one node, the harness's
// own request (no impersonated user) and a line still being written.
const sampleLog = `{"auditID":"w1","stage":"ResponseStarted","verb":"watch","requestURI":"/apis/resource.k8s.io/v1/resourceslices?watch=true","stageTimestamp":"2026-11-26T10:00:00.000000Z","impersonatedUser":{"username":"fleet:a1"},"objectRef":{"resource":"resourceslices"},"responseStatus":{"code":200}}
{"auditID":"g1","stage":"ResponseComplete","verb":"get","requestURI":"/apis/resource.k8s.io/v1/namespaces/fleet/resourceclaims/c","stageTimestamp":"2026-11-26T10:00:00.100000Z","impersonatedUser":{"username":"fleet:a1"},"objectRef":{"resource":"resourceclaims","namespace":"fleet","name":"c"},"responseStatus":{"code":200}}
{"auditID":"h1","stage":"ResponseComplete","verb":"create","requestURI":"/api/v1/nodes","stageTimestamp":"2026-11-26T10:00:00.200000Z","objectRef":{"resource":"nodes"},"responseStatus":{"code":201}}
{"auditID":"w1","stage":"ResponseComplete","verb":"watch","requestURI":"/apis/resource.k8s.io/v1/resourceslices?watch=true","stageTimestamp":"2026-11-26T10:00:01.500000Z","impersonatedUser":{"username":"fleet:a1"},"objectRef":{"resource":"resourceslices"},"responseStatus":{"code":200}}
{"auditID":"w2","stage":"ResponseStarted","verb":"watch","requestURI":"/apis/resource.k8s.io/v1/resourceslices?watch=true","stageTimestamp":"2026-11-26T10:00:03.000000Z","impersonatedUser":{"username":"fleet:a1"},"objectRef":{"resource":"resourceslices"},"responseStatus":{"code":200}}
{"auditID":"w3","stage":"ResponseComplete","verb":"watch","requestURI":"/apis/resource.k8s.io/v1/resourceslices?watch=true","stageTimestamp":"2026-11-26T10:00:03.100000Z","impersonatedUser":{"username":"fleet:u1"},"objectRef":{"resource":"resourceslices"},"responseStatus":{"code":410}}
{"auditID":"p1","stage":"ResponseComplete","verb":"patch","requestURI":"/apis/resource.k8s.io/v1/namespaces/fleet/resourceclaims/c/status","stageTimestamp":"2026-11-26T10:00:03.200000Z","impersonatedUser":{"username":"fleet:a1"},"objectRef":{"resource":"resourceclaims","namespace":"fleet","name":"c"},"responseStatus":{"code":200}}
{"auditID":"x1","stage":"Resp`

func TestAuditCounting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(sampleLog), 0o644); err != nil {
		t.Fatal(err)
	}
	events, err := Audit{Path: path}.Events()
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 7 {
		t.Fatalf("%d events, want 7 (the partial line is not one)", len(events))
	}
	all := PerNode(events, 0, 1<<62)
	if got := all["a1"].String(); got != "get resourceclaims=1, patch resourceclaims=1, watch resourceslices=2" {
		t.Errorf("a1: %s", got)
	}
	if all["a1"].Writes() != 1 || all["a1"].Total() != 4 {
		t.Errorf("a1: %d writes of %d, want 1 of 4", all["a1"].Writes(), all["a1"].Total())
	}
	if got := all["u1"].String(); got != "watch resourceslices=1" {
		t.Errorf("u1 (a refused watch counts once): %s", got)
	}
	if _, ok := all[""]; ok {
		t.Error("the harness's own request counted for a node")
	}
	// A phase starting after the first watch began does not count it when
	// it ends.
	later := PerNode(events, events[3].Offset, 1<<62)
	if got := later["a1"]["watch resourceslices"]; got != 1 {
		t.Errorf("watches of a1 from the 4th event: %d, want 1", got)
	}
	open := OpenWatches(events, 1<<62)
	if got := open["a1"].Total(); got != 1 {
		t.Errorf("open watches of a1: %d, want 1 (w2)", got)
	}
	if got := OpenWatches(events, events[3].Offset)["a1"].Total(); got != 1 {
		t.Errorf("open watches of a1 before w1 ended: %d, want 1", got)
	}
	peak, total := PeakPerSecond(events, 0, 1<<62, func(string) bool { return true })
	if peak != 3 || total != 5 {
		t.Errorf("peak %d of %d, want 3 (w2, w3, p1 within 200 ms) of 5 (w1 once, g1, w2, w3, p1)", peak, total)
	}
	if got := fmt.Sprint(PerSecond(events, 0, 1<<62, func(string) bool { return true })); got != "[2 0 0 3]" {
		t.Errorf("per second %s, want [2 0 0 3] (w1 and g1, two empty seconds, w2, w3 and p1)", got)
	}
	if k := events[2].Kind(); k != "create nodes" || events[2].Node() != "" {
		t.Errorf("harness event: kind %q node %q", k, events[2].Node())
	}
	if !strings.HasPrefix(NodeUser("a1"), UserPrefix) {
		t.Error("NodeUser without the prefix")
	}
}

// A dry run (the agent's probe of what the API server keeps of a slice)
// is counted as a request of its own kind, never as a write.
func TestDryRunIsNoWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	log := `{"auditID":"d1","stage":"ResponseComplete","verb":"create","requestURI":"/apis/resource.k8s.io/v1/resourceslices?dryRun=All","impersonatedUser":{"username":"fleet:a1"},"objectRef":{"resource":"resourceslices"},"responseStatus":{"code":201}}
{"auditID":"c1","stage":"ResponseComplete","verb":"create","requestURI":"/apis/resource.k8s.io/v1/resourceslices","impersonatedUser":{"username":"fleet:a1"},"objectRef":{"resource":"resourceslices"},"responseStatus":{"code":201}}
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	events, err := Audit{Path: path}.Events()
	if err != nil {
		t.Fatal(err)
	}
	c := PerNode(events, 0, 1<<62)["a1"]
	if got := c.String(); got != "create resourceslices=1, dry-run-create resourceslices=1" {
		t.Errorf("a1: %s", got)
	}
	if c.Writes() != 1 || events[0].IsWrite() {
		t.Errorf("a1: %d writes, want 1 (the dry run is none)", c.Writes())
	}
}
