package drabench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkShares: each iteration is one round in which every driver, in
// an order that rotates from round to round, has the kubelet's DRA
// manager prepare and unprepare 50 pods' claims one at a time, then 50
// more with 16 pod workers at once. Timed are the kubelet's
// PrepareResources and UnprepareResources calls, scheduling and the
// resourceclaim controller's work are not. A driver's share is its time
// minus the null driver's in the same round (the floor: the kubelet and
// the API server's part of the kubelet's requests); the figures reported
// are medians over the rounds of the shares and of the ratio of
// dranode-agent's share to the upstream helper's. Run it with
// -benchtime=Nx (N rounds); see BENCHMARKS.md.
//
// DRABENCH_PROFILE_DIR, when set, makes the agent serve pprof
// (DRANODE_HTTP_PPROF, which also turns on its block profile) and receives
// its CPU and block profiles over its 16-at-once prepare and unprepare,
// one pair per round.
func BenchmarkShares(b *testing.B) {
	profileDir := os.Getenv("DRABENCH_PROFILE_DIR")
	if profileDir != "" {
		if err := os.MkdirAll(profileDir, 0o755); err != nil {
			b.Fatalf("DRABENCH_PROFILE_DIR: %v", err)
		}
	}
	kinds := []string{kindNull, kindAgent, kindUpstream, kindExample}
	nodes := map[string]*driverNode{}
	for _, k := range kinds {
		nodes[k] = newDriverNode(b, k)
	}
	const pods = 50
	// per measurement, per driver: one value per round
	type series map[string][]float64
	m := map[string]series{}
	record := func(what, kind string, d time.Duration) {
		if m[what] == nil {
			m[what] = series{}
		}
		m[what][kind] = append(m[what][kind], ms(d))
	}
	round := 0
	b.ReportAllocs()
	for b.Loop() {
		order := slices.Clone(kinds)
		// Rotate: no driver always runs first (after the others' cleanup)
		// or last.
		for range round % len(order) {
			order = append(order[1:], order[0])
		}
		for _, k := range order {
			n := nodes[k]
			b.StopTimer()
			ps := n.schedule(pods)
			b.StartTimer()
			before := n.phases()
			lat, _, err := each(ps, 1, n.prepare)
			if err != nil {
				b.Fatal(err)
			}
			record("one-prepare-p50", k, quantile(lat, 0.5))
			n.logPhases(before, "one at a time")
			lat, _, err = each(ps, 1, n.unprepare)
			if err != nil {
				b.Fatal(err)
			}
			record("one-unprepare-p50", k, quantile(lat, 0.5))
			b.StopTimer()
			n.remove(ps)
			ps = n.schedule(pods)
			b.StartTimer()

			stopProfile := startProfile(b, n, profileDir, fmt.Sprintf("round%d-16", round))
			lat, all, err := each(ps, 16, n.prepare)
			if err != nil {
				b.Fatal(err)
			}
			record("16-prepare-all", k, all)
			record("16-prepare-p50", k, quantile(lat, 0.5))
			lat, all, err = each(ps, 16, n.unprepare)
			if err != nil {
				b.Fatal(err)
			}
			record("16-unprepare-p50", k, quantile(lat, 0.5))
			record("16-unprepare-all", k, all)
			b.StopTimer()
			n.remove(ps)
			stopProfile()
			b.StartTimer()
		}
		round++
	}
	b.StopTimer()
	for _, what := range slices.Sorted(maps.Keys(m)) {
		s := m[what]
		share := map[string][]float64{}
		var ratioU, ratioE []float64
		for i := range s[kindNull] {
			for _, k := range kinds[1:] {
				share[k] = append(share[k], s[k][i]-s[kindNull][i])
			}
			a := share[kindAgent][i]
			ratioU, ratioE = append(ratioU, a/share[kindUpstream][i]), append(ratioE, a/share[kindExample][i])
		}
		b.ReportMetric(median(s[kindNull]), what+"-floor-ms")
		for _, k := range kinds[1:] {
			b.ReportMetric(median(share[k]), what+"-"+k+"-share-ms")
		}
		b.ReportMetric(median(ratioU), what+"-agent/upstream")
		b.ReportMetric(median(ratioE), what+"-agent/example")
		b.Logf("%s per round, ms: floor %s; agent %s; upstream %s; example %s; agent/upstream share %s; agent/example share %s",
			what, list(s[kindNull]), list(s[kindAgent]), list(s[kindUpstream]), list(s[kindExample]), list(ratioU), list(ratioE))
	}
}

// phaseTimes is the agent's dranode_prepare_phase_duration_seconds by
// phase.
type phaseTimes map[string]phaseTime

// phaseTime is one phase's sum of durations, in seconds, and their count.
type phaseTime struct {
	sum   float64
	count uint64
}

// phases scrapes the agent's prepare phases; nil for other drivers.
func (n *driverNode) phases() phaseTimes {
	if n.kind != kindAgent {
		return nil
	}
	families, err := n.agent.Metrics(n.ctx)
	if err != nil {
		n.t.Fatal(err)
	}
	out := phaseTimes{}
	if f := families["dranode_prepare_phase_duration_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "phase" {
					out[l.GetValue()] = phaseTime{m.GetHistogram().GetSampleSum(), m.GetHistogram().GetSampleCount()}
				}
			}
		}
	}
	return out
}

// logPhases logs where the agent's prepares since before spent their time,
// as the agent measured it: the mean of each phase per prepare.
func (n *driverNode) logPhases(before phaseTimes, what string) {
	if before == nil {
		return
	}
	after := n.phases()
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(after)) {
		d := after[p].count - before[p].count
		if d == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f ms", p, (after[p].sum-before[p].sum)*1000/float64(d)))
	}
	n.t.Logf("agent's prepare phases, %s, mean per prepare: %s", what, strings.Join(parts, ", "))
}

func list(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, " ")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantile of durations (nearest rank).
func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// startProfile, when dir is set and n is the agent's node, starts a CPU
// profile and a block profile of the agent, each over the next
// profileSeconds; the returned function waits for them and saves them
// into dir. The CPU profile samples only what the agent runs, so the
// idle rest of the window costs nothing but the wait.
func startProfile(b *testing.B, n *driverNode, dir, name string) func() {
	if dir == "" || n.kind != kindAgent {
		return func() {}
	}
	type result struct {
		kind string
		data []byte
		err  error
	}
	done := make(chan result, 2)
	for _, kind := range []string{"profile", "block"} {
		go func() {
			data, err := fetch(n.ctx, n.agent.HTTPAddr, fmt.Sprintf("/debug/pprof/%s?seconds=%d", kind, profileSeconds))
			done <- result{kind, data, err}
		}()
	}
	return func() {
		for range 2 {
			r := <-done
			if r.err != nil {
				b.Fatal(r.err)
			}
			file := filepath.Join(dir, fmt.Sprintf("%s-%s.pb.gz", name, map[string]string{"profile": "cpu", "block": "block"}[r.kind]))
			if err := os.WriteFile(file, r.data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// profileSeconds covers the agent's 16-at-once prepare and unprepare of
// 50 pods with room to spare on a loaded machine.
const profileSeconds = 20

func fetch(ctx context.Context, addr, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %d: %s (is DRANODE_HTTP_PPROF=true set?)", path, resp.StatusCode, data)
	}
	return data, err
}
