package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/dranode/dranode/agent/config"
	"github.com/dranode/dranode/cdi"
	"github.com/dranode/dranode/checkpoint/kubeletcompat"
)

// counterValue sums the samples of a counter or gauge family whose labels
// include want.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
	metric:
		for _, m := range fam.GetMetric() {
			for k, v := range want {
				found := false
				for _, l := range m.GetLabel() {
					found = found || l.GetName() == k && l.GetValue() == v
				}
				if !found {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// waitFor polls cond until it holds; the deadline only bounds a broken run.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type sweepEnv struct {
	*testEnv
	calls string
	reg   *prometheus.Registry
	logs  *logLines
}

func newSweepEnv(t *testing.T) *sweepEnv {
	e := &sweepEnv{testEnv: newTestEnv(t), reg: prometheus.NewRegistry(), logs: &logLines{}}
	plugin := journalPlugin(t)
	e.calls = filepath.Join(e.root, "calls")
	e.cfg.Plugins.Drivers = []config.Driver{{Name: "journal", Path: plugin, SHA256: sha256File(t, plugin),
		Config: map[string]any{"driverName": journalDriver, "numDevices": 8, "callLog": e.calls}}}
	e.cfg.Kubelet.DRAManagerState = filepath.Join(e.root, "kubelet", kubeletcompat.DRAManagerStateFile)
	e.cfg.Cleanup = config.Cleanup{Interval: 20 * time.Millisecond, GracePeriod: 200 * time.Millisecond}
	return e
}

func (e *sweepEnv) start(t *testing.T) *Agent {
	return e.testEnv.start(t, Options{Registry: e.reg, Logger: funcr.New(func(prefix, args string) {
		e.logs.mu.Lock()
		e.logs.lines = append(e.logs.lines, prefix+" "+args)
		e.logs.mu.Unlock()
	}, funcr.Options{Verbosity: 1})})
}

func (e *sweepEnv) sweeps(t *testing.T, result string) float64 {
	return counterValue(t, e.reg, "dranode_record_sweeps_total", map[string]string{"result": result})
}

// reserved marks c as reserved for a pod.
func reserved(c *resourcev1.ResourceClaim) *resourcev1.ResourceClaim {
	c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod-" + c.Name, UID: "pod-uid-" + c.UID}}
	return c
}

// A real agent with a real plugin: of four prepared claims, the one whose
// ResourceClaim is deleted and the one no pod is reserved for are
// unprepared through the plugin and removed after the grace period, with
// their CDI specs; the one the kubelet's checkpoint lists (though its
// ResourceClaim is deleted too) and the one reserved for a pod survive any
// number of sweeps.
func TestSweepCleansLeftoversOnly(t *testing.T) {
	e := newSweepEnv(t)
	mk := func(i int, name string) *resourcev1.ResourceClaim {
		return claim("default", name, fmt.Sprintf("00000000-0000-0000-0016-00000000000%d", i), "node-a", [2]string{journalDriver, fmt.Sprintf("gpu-%d", i)})
	}
	gone, unreserved, listed, inUse := reserved(mk(0, "gone")), mk(1, "unreserved"), reserved(mk(2, "listed")), reserved(mk(3, "in-use"))
	all := []*resourcev1.ResourceClaim{gone, unreserved, listed, inUse}
	for _, c := range all {
		e.writeClaim(t, c)
	}
	writeDRAManagerState(t, e.cfg.Kubelet.DRAManagerState, map[*resourcev1.ResourceClaim][]string{listed: nil})
	a := e.start(t)
	resp := connectKubelet(t, e.cfg, journalDriver).prepare(t, all...)
	for _, c := range all {
		mustPrepared(t, resp, c)
	}
	for _, c := range []*resourcev1.ResourceClaim{gone, listed} {
		if err := os.Remove(filepath.Join(e.claimsDir, c.Name+".yaml")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "two claims cleaned", func() bool {
		return counterValue(t, e.reg, "dranode_record_cleaned_claims_total", nil) >= 2
	})
	for reason, want := range map[string]float64{"claim-deleted": 1, "claim-unreserved": 1, "claim-recreated": 0} {
		if got := counterValue(t, e.reg, "dranode_record_cleaned_claims_total", map[string]string{"reason": reason}); got != want {
			t.Errorf("dranode_record_cleaned_claims_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	// Many more sweeps, well past the grace period.
	after := e.sweeps(t, sweepDone)
	waitFor(t, "30 more sweeps", func() bool { return e.sweeps(t, sweepDone) >= after+30 })

	var unprepared []string
	for _, l := range callLines(t, e.calls) {
		if strings.HasPrefix(l, "unprepare ") {
			unprepared = append(unprepared, l)
		}
	}
	want := []string{"unprepare " + string(gone.UID) + " pool-a/gpu-0", "unprepare " + string(unreserved.UID) + " pool-a/gpu-1"}
	slices.Sort(unprepared)
	if !slices.Equal(unprepared, want) {
		t.Errorf("plugin unprepared %q, want %q", unprepared, want)
	}
	var left []string
	for _, en := range a.record.Cache().List() {
		left = append(left, en.Claim.Name)
	}
	if w := []string{"in-use", "listed"}; !slices.Equal(left, w) {
		t.Errorf("record holds %v, want %v", left, w)
	}
	for _, c := range all {
		_, exists, err := a.specs.Lookup(journalDriver, cdi.ClaimClass, string(c.UID))
		if err != nil {
			t.Fatal(err)
		}
		if wantSpec := c == listed || c == inUse; exists != wantSpec {
			t.Errorf("claim %s: CDI spec exists=%v, want %v", c.Name, exists, wantSpec)
		}
	}
	for _, c := range []*resourcev1.ResourceClaim{gone, unreserved} {
		if got := e.logs.with("Leftover claim cleaned", string(c.UID)); len(got) != 1 {
			t.Errorf("log lines for cleaning %s: %q, want one", c.Name, got)
		}
	}
}

// Without a readable kubelet checkpoint nothing is swept, whatever the
// claim source says, and the metric and one log line say why; once the
// checkpoint is readable the leftover is cleaned.
func TestSweepNeedsTheKubeletCheckpoint(t *testing.T) {
	e := newSweepEnv(t)
	gone := claim("default", "gone", "00000000-0000-0000-0016-0000000000aa", "node-a", [2]string{journalDriver, "gpu-0"})
	e.writeClaim(t, gone)
	a := e.start(t)
	mustPrepared(t, connectKubelet(t, e.cfg, journalDriver).prepare(t, gone), gone)
	if err := os.Remove(filepath.Join(e.claimsDir, "gone.yaml")); err != nil {
		t.Fatal(err)
	}
	// The cleanup's own temp debris, old enough, goes with the sweep.
	debris := filepath.Join(e.cfg.CDI.Dir, "."+cdi.TransientSpecFileName(journalDriver, cdi.ClaimClass, "x")+".tmp-123")
	if err := os.WriteFile(debris, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(debris, old, old); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		result string
		write  func()
	}{
		{sweepKubeletMissing, func() {}},
		{sweepKubeletUnreadable, func() {
			if err := os.MkdirAll(filepath.Dir(e.cfg.Kubelet.DRAManagerState), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(e.cfg.Kubelet.DRAManagerState, []byte(`{"Data":"{}","Checksum":1}`), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		tc.write()
		before := e.sweeps(t, tc.result)
		waitFor(t, "20 sweeps skipped with "+tc.result, func() bool { return e.sweeps(t, tc.result) >= before+20 })
		if _, err := a.record.Cache().Get(string(gone.UID)); err != nil {
			t.Fatalf("%s: the leftover was touched: %v", tc.result, err)
		}
		if got := e.logs.with("Sweep for leftover claims skipped", tc.result); len(got) != 1 {
			t.Errorf("%s: log lines %q, want one", tc.result, got)
		}
	}
	if got := counterValue(t, e.reg, "dranode_record_cleaned_claims_total", nil); got != 0 {
		t.Errorf("cleaned %v claims without the kubelet's checkpoint", got)
	}
	if _, err := os.Stat(debris); err != nil {
		t.Errorf("temp debris went while nothing was swept: %v", err)
	}

	writeDRAManagerState(t, e.cfg.Kubelet.DRAManagerState, nil)
	waitFor(t, "the leftover cleaned", func() bool { return a.record.Cache().Len() == 0 })
	waitFor(t, "temp debris removed", func() bool { _, err := os.Stat(debris); return os.IsNotExist(err) })
}
