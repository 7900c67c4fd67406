package fleet

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// report is what README.md's tables are made of: per-node figures, as the
// mean (and the largest) over the nodes of each kind.
type report struct {
	s         settings
	lines     []string
	claims    string
	reconnect string
}

func kinds() []Kind { return []Kind{KindAgent, KindUpstream} }

// perKind sums counts over the nodes of each kind and keeps each node's
// total for the maximum.
func perKind(nodes []*Node, counts map[string]Counts) map[Kind]struct {
	sum   Counts
	max   int
	nodes int
} {
	out := map[Kind]struct {
		sum   Counts
		max   int
		nodes int
	}{}
	for _, n := range nodes {
		e := out[n.Kind]
		if e.sum == nil {
			e.sum = Counts{}
		}
		for k, v := range counts[n.Name] {
			e.sum[k] += v
		}
		e.max = max(e.max, counts[n.Name].Total())
		e.nodes++
		out[n.Kind] = e
	}
	return out
}

func mean(c Counts, nodes int) string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(c[k])/float64(nodes)))
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, ", ")
}

func newReport(s settings, nodes []*Node, events []AuditEvent, phases []phase, watches map[string]Counts, after, before map[string][2]Usage) *report {
	r := &report{s: s}
	add := func(format string, args ...any) { r.lines = append(r.lines, fmt.Sprintf(format, args...)) }
	add("| phase | driver | requests per node (mean / max) | writes per node (mean) | by verb and resource, per node (mean) |")
	add("|---|---|---|---|---|")
	for _, p := range phases {
		counts := PerNode(events, p.from, p.to)
		pk := perKind(nodes, counts)
		for _, k := range kinds() {
			e := pk[k]
			add("| %s | %s | %.2f / %d | %.2f | %s |", p.name, k, float64(e.sum.Total())/float64(e.nodes), e.max, float64(e.sum.Writes())/float64(e.nodes), mean(e.sum, e.nodes))
		}
	}
	add("")
	add("| at rest (%v) | driver | watches open per node (mean / max) | RSS driver (mean / max) | RSS its children (mean) | anonymous memory, driver + children (mean / max) | CPU driver + children over the window (mean / max) |", s.rest)
	add("|---|---|---|---|---|---|---|")
	pk := perKind(nodes, watches)
	for _, k := range kinds() {
		e := pk[k]
		var rss, rssMax, kids, anon, anonMax int64
		var cpu, cpuMax time.Duration
		count := 0
		for _, n := range nodes {
			if n.Kind != k {
				continue
			}
			a, b := after[n.Name], before[n.Name]
			rss += a[0].RSS
			rssMax = max(rssMax, a[0].RSS)
			kids += a[1].RSS
			anon += a[0].Anon + a[1].Anon
			anonMax = max(anonMax, a[0].Anon+a[1].Anon)
			c := a[0].CPU + a[1].CPU - b[0].CPU - b[1].CPU
			cpu += c
			cpuMax = max(cpuMax, c)
			count++
		}
		pct := func(d time.Duration) float64 { return 100 * d.Seconds() / s.rest.Seconds() }
		add("| | %s | %.2f / %d (%s) | %.1f / %.1f MiB | %.1f MiB | %.1f / %.1f MiB | %.4f%% / %.4f%% of a core (%.1f ms per node per minute) |", k,
			float64(e.sum.Total())/float64(e.nodes), e.max, mean(e.sum, e.nodes),
			float64(rss)/float64(count)/(1<<20), float64(rssMax)/(1<<20), float64(kids)/float64(count)/(1<<20),
			float64(anon)/float64(count)/(1<<20), float64(anonMax)/(1<<20),
			pct(cpu/time.Duration(count)), pct(cpuMax), float64(cpu.Microseconds())/1e3/float64(count)/s.rest.Minutes())
	}
	return r
}

// claimCost is the requests per claim (prepare and unprepare) by driver.
func claimCost(events []AuditEvent, nodes []*Node, prepare, unprepare phase, claims int) string {
	var b strings.Builder
	for _, k := range kinds() {
		sum := Counts{}
		count := 0
		for _, n := range nodes {
			if n.Kind != k {
				continue
			}
			count++
			for _, p := range []phase{prepare, unprepare} {
				for kind, v := range PerNode(events, p.from, p.to)[n.Name] {
					sum[kind] += v
				}
			}
		}
		fmt.Fprintf(&b, "per claim, %s: %.2f requests, %.2f writes (%s)\n", k,
			float64(sum.Total())/float64(count*claims), float64(sum.Writes())/float64(count*claims), mean(sum, count*claims))
	}
	return b.String()
}

func (r *report) String() string {
	return fmt.Sprintf("fleet: %d nodes per driver, %d claims per node\n%s\n\n%s%s\n", r.s.nodes, r.s.claims,
		strings.Join(r.lines, "\n"), r.claims, r.reconnect)
}
