package agent

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	resourcev1 "k8s.io/api/resource/v1"
)

// histogram is one series of a gathered histogram.
type histogram struct {
	count uint64
	sum   float64
}

// gatherHistograms returns the series of the named histogram by their
// labels ("driver=x,phase=y", in the registry's label order).
func gatherHistograms(t *testing.T, reg *prometheus.Registry, name string) map[string]histogram {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]histogram{}
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			h := m.GetHistogram()
			out[strings.Join(labels, ",")] = histogram{count: h.GetSampleCount(), sum: h.GetSampleSum()}
		}
	}
	return out
}

// The phase histograms count what each prepare really did: a first
// prepare runs every phase (but record-started, for a plugin whose Prepare
// is stateless: the claim is recorded once), one answered from the record
// only waits for the claim's lock, and one recreating a missing CDI spec
// fetches the claim, calls the plugin and writes the spec but records
// nothing. The overhead histogram excludes exactly the plugin's share.
func TestPreparePhaseMetrics(t *testing.T) {
	for _, stateless := range []bool{true, false} {
		t.Run(fmt.Sprint("statelessPrepare=", stateless), func(t *testing.T) {
			testPreparePhaseMetrics(t, stateless)
		})
	}
}

func testPreparePhaseMetrics(t *testing.T, stateless bool) {
	e := newTestEnv(t, gpuDriver)
	e.cfg.Plugins.Drivers[0].Config["statelessPrepare"] = stateless
	started := uint64(3) // record-started, per first prepare
	if stateless {
		started = 0
	}
	reg := prometheus.NewRegistry()
	a := e.start(t, Options{Registry: reg})
	k := connectKubelet(t, e.cfg, gpuDriver)
	var claims []*resourcev1.ResourceClaim
	for i, uid := range []string{"00000000-0000-0000-0009-000000000000", "00000000-0000-0000-0009-000000000001", "00000000-0000-0000-0009-000000000002"} {
		c := claim("default", "phase"+uid[len(uid)-1:], uid, "node-a", [2]string{gpuDriver, "gpu-" + string(rune('0'+i))})
		e.writeClaim(t, c)
		claims = append(claims, c)
	}
	prepare := func(cs ...*resourcev1.ResourceClaim) func(*testing.T) {
		return func(t *testing.T) {
			resp := k.prepare(t, cs...)
			for _, c := range cs {
				mustPrepared(t, resp, c)
			}
		}
	}
	phases := []string{phaseLockWait, phaseClaimFetch, phaseRecordStarted, phasePlugin, phaseRecordPrepared, phaseCDIWrite}
	steps := []struct {
		name string
		do   func(*testing.T)
		// Cumulative counts per phase after the step; overhead counts
		// every Prepare.
		want     map[string]uint64
		overhead uint64
	}{
		{
			name:     "first prepare runs every phase",
			do:       prepare(claims...),
			want:     map[string]uint64{phaseLockWait: 3, phaseClaimFetch: 3, phaseRecordStarted: started, phasePlugin: 3, phaseCDIWrite: 3, phaseRecordPrepared: 3},
			overhead: 3,
		},
		{
			name:     "prepared claims are answered from the record",
			do:       prepare(claims...),
			want:     map[string]uint64{phaseLockWait: 6, phaseClaimFetch: 3, phaseRecordStarted: started, phasePlugin: 3, phaseCDIWrite: 3, phaseRecordPrepared: 3},
			overhead: 6,
		},
		{
			name: "a missing CDI spec is recreated without recording",
			do: func(t *testing.T) {
				path := specPath(e.cfg, gpuDriver, string(claims[1].UID))
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				prepare(claims[1])(t)
			},
			want:     map[string]uint64{phaseLockWait: 7, phaseClaimFetch: 4, phaseRecordStarted: started, phasePlugin: 4, phaseCDIWrite: 4, phaseRecordPrepared: 3},
			overhead: 7,
		},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			step.do(t)
			got := gatherHistograms(t, reg, "dranode_prepare_phase_duration_seconds")
			for _, p := range phases {
				if c := got["driver="+gpuDriver+",phase="+p].count; c != step.want[p] {
					t.Errorf("phase %s observed %d times, want %d", p, c, step.want[p])
				}
			}
			over := gatherHistograms(t, reg, "dranode_prepare_overhead_seconds")["driver="+gpuDriver]
			if over.count != step.overhead {
				t.Errorf("overhead observed %d times, want %d", over.count, step.overhead)
			}
			total := gatherHistograms(t, reg, "dranode_prepare_duration_seconds")["driver="+gpuDriver]
			plugin := got["driver="+gpuDriver+",phase="+phasePlugin].sum
			// The whole prepare (timed around Prepare) holds the overhead
			// and the plugin's share; the overhead holds every other phase.
			if over.sum+plugin > total.sum {
				t.Errorf("overhead %gs + plugin %gs > whole prepares %gs", over.sum, plugin, total.sum)
			}
			// The phases run one after another: all of them but the
			// plugin's fit in the overhead.
			var own float64
			for _, p := range phases {
				if p != phasePlugin {
					own += got["driver="+gpuDriver+",phase="+p].sum
				}
			}
			if own > over.sum {
				t.Errorf("the agent's phases took %gs, more than its overhead %gs", own, over.sum)
			}
		})
	}
	if a.record.Cache().Len() != 3 {
		t.Errorf("record holds %d claims, want 3", a.record.Cache().Len())
	}
}
