package powerloss

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/dranode/dranode/checkpoint"
)

// The journal workload: each goroutine g commits step s as one batch, the
// put of key g<g>/<s> and the delete of g<g>/<s-journalWindow>, so the
// state always holds exactly the last journalWindow steps of each
// goroutine, and the log outgrows it quickly: with the small compaction
// threshold, compactions (log rotation, snapshot write, removal of
// superseded logs) happen every few dozen commits.
const journalWindow = 3

var journalSchema = checkpoint.Schema{Kind: "powerloss.dranode.io/journal", Version: 1}

func journalOptions() []checkpoint.Option {
	return []checkpoint.Option{checkpoint.WithCompaction(2048, 2)}
}

type journalValue struct {
	G   int    `json:"g"`
	S   int    `json:"s"`
	Pad string `json:"pad"`
}

func journalKey(g, s int) string { return fmt.Sprintf("g%d/%08d", g, s) }

// journalVal is the value of step s: its size varies so that appends and
// snapshots cross different boundaries.
func journalVal(g, s int) journalValue {
	return journalValue{G: g, S: s, Pad: strings.Repeat(string(rune('a'+(g+s)%26)), 16+(s*37+g*11)%200)}
}

func parseJournalKey(key string) (g, s int, ok bool) {
	gs, ss, found := strings.Cut(key, "/")
	if !found || !strings.HasPrefix(gs, "g") {
		return 0, 0, false
	}
	g, err1 := strconv.Atoi(gs[1:])
	s, err2 := strconv.Atoi(ss)
	return g, s, err1 == nil && err2 == nil && key == journalKey(g, s)
}

func init() {
	workloads["journal"] = workload{write: writeJournal, newChecker: func() checker {
		return &journalChecker{newSequences("step")}
	}}
}

func writeJournal(dir string, env WriterEnv, out *Acker) error {
	j, err := checkpoint.OpenJournal[journalValue](dir, journalSchema, journalOptions()...)
	if err != nil {
		return fmt.Errorf("open journal: %w", err)
	}
	last := journalSteps(j.Snapshot())
	var wg sync.WaitGroup
	errs := make([]error, env.Goroutines)
	for g := range env.Goroutines {
		wg.Go(func() {
			for s := last[g] + 1; s <= last[g]+env.Steps; s++ {
				changes := []checkpoint.Change[journalValue]{{Key: journalKey(g, s), Value: journalVal(g, s)}}
				if s > journalWindow {
					changes = append(changes, checkpoint.Change[journalValue]{Key: journalKey(g, s-journalWindow), Delete: true})
				}
				out.Try(strconv.Itoa(g), "commit", strconv.Itoa(s))
				if err := j.Commit(changes...); err != nil {
					errs[g] = fmt.Errorf("goroutine %d step %d: %w", g, s, err)
					return
				}
				out.Ack(strconv.Itoa(g), "commit", strconv.Itoa(s))
			}
		})
	}
	wg.Wait()
	if err := j.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close journal: %w", err))
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// journalSteps returns, per goroutine, the last step in the state.
func journalSteps(state map[string]journalValue) map[int]int {
	last := map[int]int{}
	for k := range state {
		if g, s, ok := parseJournalKey(k); ok && s > last[g] {
			last[g] = s
		}
	}
	return last
}

// journalChecker follows each goroutine's steps.
type journalChecker struct {
	sequences
}

func (c *journalChecker) setup(dir string) error {
	j, err := checkpoint.OpenJournal[journalValue](dir, journalSchema, journalOptions()...)
	if err != nil {
		return err
	}
	return j.Close()
}

func (c *journalChecker) load(dir string) (map[string]journalValue, *Violation) {
	state := map[string]journalValue{}
	if !exists(dir) {
		// Opening would create it: a change to the disk the next run
		// would wrongly start from. A missing journal is an empty one.
		return state, nil
	}
	v := reopen("checkpoint.OpenJournal", func() error {
		j, err := checkpoint.OpenJournal[journalValue](dir, journalSchema, journalOptions()...)
		if err != nil {
			return err
		}
		state = j.Snapshot()
		return j.Close()
	})
	return state, v
}

func (c *journalChecker) reset(dir string) error {
	state, v := c.load(dir)
	if v != nil {
		return v
	}
	c.adopt(journalSteps(state))
	return nil
}

// check: for every goroutine the state must be exactly the state after
// some step s, where s is the last acknowledged step (or the step the run
// started from), or the one attempted after it.
func (c *journalChecker) check(dir string) ([]Violation, int, int) {
	acks := c.acks()
	state, v := c.load(dir)
	if v != nil {
		return []Violation{*v}, acks, 0
	}
	var vs []Violation
	byG := map[int]map[string]journalValue{}
	for k, val := range state {
		g, _, ok := parseJournalKey(k)
		if !ok {
			vs = append(vs, Violation{Kind: Invented, Key: k, Detail: "a key no writer uses"})
			continue
		}
		if byG[g] == nil {
			byG[g] = map[string]journalValue{}
		}
		byG[g][k] = val
	}
	steps := journalSteps(state)
	for _, g := range c.goroutines(steps) {
		got := steps[g]
		key := fmt.Sprintf("goroutine %d", g)
		if v := c.judge(g, got, key); v != nil {
			vs = append(vs, *v)
			continue
		}
		// Exactly the window of step got, with the exact values: a
		// partial batch or a damaged value shows here.
		want := map[string]journalValue{}
		for s := max(1, got-journalWindow+1); s <= got; s++ {
			want[journalKey(g, s)] = journalVal(g, s)
		}
		if d := diffJournal(byG[g], want); d != "" {
			vs = append(vs, Violation{Kind: Corrupt, Key: key, Detail: fmt.Sprintf("state at step %d is not the state after that step: %s", got, d)})
		}
	}
	c.adopt(steps)
	return vs, acks, 0
}

func diffJournal(got, want map[string]journalValue) string {
	var d []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			d = append(d, "missing "+k)
		} else if g != w {
			d = append(d, "wrong value of "+k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, "extra "+k)
		}
	}
	sort.Strings(d)
	return strings.Join(d, ", ")
}

func sortedInts(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}
