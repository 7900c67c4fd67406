package powerloss

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/dranode/dranode/checkpoint"
	"github.com/dranode/dranode/claimcache"
)

// The claimcache workload: every run is a boot (boot ID "boot-<run>"), as
// after a real power cut. A run first deals with what the record holds
// from earlier boots, as an agent would: a claim still wanted is prepared
// again (StartPrepare on the stale entry, then FinishPrepare with this
// boot's devices), the others are rolled back (StartUnprepare, Remove).
// Then each goroutine takes Steps new claims through StartPrepare and
// FinishPrepare, and unprepares (StartUnprepare, Remove) the previous one
// unless it is one that stays prepared (every third), so that the record
// always holds prepared claims for the next boot.
func init() {
	workloads["claimcache"] = workload{write: writeClaims, newChecker: func() checker {
		c := &claimChecker{}
		c.adopt(map[string]claimState{})
		return c
	}}
}

const claimDriver = "gpu.powerloss.dranode.io"

func claimOpen(dir, boot string) (*claimcache.Cache, *claimcache.RestoreReport, error) {
	return claimcache.Open(dir, boot, claimcache.WithJournalOptions(checkpoint.WithCompaction(2048, 2)))
}

func claimRef(run, g, k int) claimcache.ClaimRef {
	return claimcache.ClaimRef{
		Namespace: "ns-" + strconv.Itoa(g),
		Name:      fmt.Sprintf("claim-r%d-g%d-c%d", run, g, k),
		UID:       fmt.Sprintf("uid-r%d-g%d-c%d", run, g, k),
	}
}

func claimPod(uid string) string { return "pod-" + uid }

// claimDevices are what the driver prepared for uid in boot: they differ
// between boots, so a prepare in a new boot that was lost shows.
func claimDevices(uid, boot string) map[string][]claimcache.Device {
	h := fnv.New32a()
	h.Write([]byte(uid))
	n := h.Sum32() % 8
	return map[string][]claimcache.Device{claimDriver: {{
		Pool:         "pool-" + strconv.Itoa(int(n%2)),
		Device:       "gpu-" + strconv.Itoa(int(n)),
		Requests:     []string{"gpu"},
		CDIDeviceIDs: []string{claimDriver + "/claim=" + uid + "-" + boot},
	}}}
}

// keepAcrossBoot decides, per boot, whether an entry found from an earlier
// boot is prepared again or rolled back.
func keepAcrossBoot(uid, boot string) bool {
	h := fnv.New32a()
	h.Write([]byte(uid + "/" + boot))
	return h.Sum32()%2 == 0
}

// claimOp is a call the writer announced: its name and arguments.
type claimOp struct {
	Op      string                         `json:"op"`
	Ref     claimcache.ClaimRef            `json:"ref,omitzero"`
	Pod     string                         `json:"pod,omitempty"`
	Boot    string                         `json:"boot,omitempty"`
	Drivers map[string][]claimcache.Device `json:"drivers,omitempty"`
}

// claimState is what the checks compare: an entry without Stale (which
// depends on the boot that reads it), in a canonical form.
type claimState struct {
	Claim   claimcache.ClaimRef
	State   claimcache.State
	Drivers map[string][]claimcache.Device
	PodUIDs []string
	BootID  string
}

func stateOf(e claimcache.Entry) claimState {
	return claimState{Claim: e.Claim, State: e.State, Drivers: e.Drivers, PodUIDs: e.PodUIDs, BootID: e.BootID}
}

// canon is a comparable form: nil and empty collections are the same.
func (s claimState) canon() string {
	c := s
	c.Drivers = nil
	for d, devs := range s.Drivers {
		norm := make([]claimcache.Device, len(devs))
		for i, dev := range devs {
			if len(dev.Requests) == 0 {
				dev.Requests = nil
			}
			if len(dev.CDIDeviceIDs) == 0 {
				dev.CDIDeviceIDs = nil
			}
			norm[i] = dev
		}
		if c.Drivers == nil {
			c.Drivers = map[string][]claimcache.Device{}
		}
		c.Drivers[d] = norm
	}
	if len(c.PodUIDs) == 0 {
		c.PodUIDs = nil
	}
	b, _ := json.Marshal(c)
	return string(b)
}

// next is the documented effect of op on a claim in state cur (nil: no
// entry); nil means the entry is removed.
func (op claimOp) next(cur *claimState) *claimState {
	switch op.Op {
	case "StartPrepare":
		n := claimState{Claim: op.Ref}
		if cur != nil {
			n = *cur
			n.PodUIDs = slices.Clone(cur.PodUIDs)
		}
		n.State, n.BootID = claimcache.PrepareStarted, op.Boot
		if op.Pod != "" && !slices.Contains(n.PodUIDs, op.Pod) {
			n.PodUIDs = append(n.PodUIDs, op.Pod)
			sort.Strings(n.PodUIDs)
		}
		return &n
	case "FinishPrepare":
		n := *cur
		n.State, n.Drivers = claimcache.Prepared, op.Drivers
		return &n
	case "StartUnprepare":
		n := *cur
		n.State = claimcache.UnprepareStarted
		return &n
	}
	return nil // Remove
}

func writeClaims(dir string, env WriterEnv, out *Acker) error {
	boot := "boot-" + strconv.Itoa(env.Run)
	cache, _, err := claimOpen(dir, boot)
	if err != nil {
		return fmt.Errorf("open claim record: %w", err)
	}
	old := cache.List()
	var wg sync.WaitGroup
	errs := make([]error, env.Goroutines)
	for g := range env.Goroutines {
		wg.Go(func() {
			w := claimWriter{cache: cache, out: out, boot: boot}
			for i := g; i < len(old); i += env.Goroutines {
				e := old[i]
				if e.State != claimcache.UnprepareStarted && keepAcrossBoot(e.Claim.UID, boot) {
					w.prepare(e.Claim, claimPod(e.Claim.UID))
				} else {
					w.unprepare(e.Claim.UID)
				}
			}
			for k := range env.Steps {
				ref := claimRef(env.Run, g, k)
				w.prepare(ref, claimPod(ref.UID))
				if k > 0 && (k-1)%3 != 2 {
					w.unprepare(claimRef(env.Run, g, k-1).UID)
				}
			}
			errs[g] = w.err
		})
	}
	wg.Wait()
	return errors.Join(append(errs, cache.Close())...)
}

// claimWriter makes calls on one goroutine, announcing each and
// acknowledging it with the entry it returned. After an error it does
// nothing more.
type claimWriter struct {
	cache *claimcache.Cache
	out   *Acker
	boot  string
	err   error
}

func (w *claimWriter) call(uid string, op claimOp, do func() (claimcache.Entry, error)) {
	if w.err != nil {
		return
	}
	args, _ := json.Marshal(op)
	w.out.Try(uid, op.Op, string(args))
	e, err := do()
	if err != nil {
		w.err = fmt.Errorf("%s %s: %w", op.Op, uid, err)
		return
	}
	got := ""
	if op.Op != "Remove" {
		b, _ := json.Marshal(stateOf(e))
		got = string(b)
	}
	w.out.Ack(uid, op.Op, got)
}

func (w *claimWriter) prepare(ref claimcache.ClaimRef, pod string) {
	w.call(ref.UID, claimOp{Op: "StartPrepare", Ref: ref, Pod: pod, Boot: w.boot}, func() (claimcache.Entry, error) {
		return w.cache.StartPrepare(ref, pod)
	})
	drivers := claimDevices(ref.UID, w.boot)
	w.call(ref.UID, claimOp{Op: "FinishPrepare", Drivers: drivers}, func() (claimcache.Entry, error) {
		return w.cache.FinishPrepare(ref.UID, drivers)
	})
}

func (w *claimWriter) unprepare(uid string) {
	w.call(uid, claimOp{Op: "StartUnprepare"}, func() (claimcache.Entry, error) {
		return w.cache.StartUnprepare(uid)
	})
	w.call(uid, claimOp{Op: "Remove"}, func() (claimcache.Entry, error) {
		return claimcache.Entry{}, w.cache.Remove(uid)
	})
}

// claimChecker holds, per claim UID, the state as of its last acknowledged
// call (absent: no entry) and the call attempted after it, if any.
type claimChecker struct {
	model map[string]claimState
	tried map[string]claimOp
	seen  map[string]bool // acknowledged this run
	acks  int
}

func (c *claimChecker) adopt(found map[string]claimState) {
	c.model, c.tried, c.seen, c.acks = found, map[string]claimOp{}, map[string]bool{}, 0
}

func (c *claimChecker) setup(dir string) error {
	cache, _, err := claimOpen(dir, "boot-0")
	if err != nil {
		return err
	}
	return cache.Close()
}

func (c *claimChecker) observe(line string) error {
	kind, uid, _, payload, err := parseLine(line)
	if err != nil {
		return err
	}
	if kind == "try" {
		var op claimOp
		if err := json.Unmarshal([]byte(payload), &op); err != nil {
			return fmt.Errorf("malformed claimcache line %q: %w", line, err)
		}
		c.tried[uid] = op
		return nil
	}
	op, ok := c.tried[uid]
	if !ok {
		return fmt.Errorf("ack of %s without a try", uid)
	}
	delete(c.tried, uid)
	c.acks++
	c.seen[uid] = true
	var cur *claimState
	if s, ok := c.model[uid]; ok {
		cur = &s
	}
	want := op.next(cur)
	if want == nil {
		delete(c.model, uid)
		return nil
	}
	// The call's own result must be the documented one: otherwise the
	// model the checks rely on is wrong.
	var got claimState
	if err := json.Unmarshal([]byte(payload), &got); err != nil {
		return fmt.Errorf("malformed claimcache ack %q: %w", line, err)
	}
	if got.canon() != want.canon() {
		return fmt.Errorf("%s %s returned %s, want %s", op.Op, uid, got.canon(), want.canon())
	}
	c.model[uid] = *want
	return nil
}

func (c *claimChecker) load(dir string) (map[string]claimState, *Violation) {
	found := map[string]claimState{}
	if !exists(dir) {
		return found, nil // as for the journal: do not create it
	}
	v := reopen("claimcache.Open", func() error {
		cache, _, err := claimOpen(dir, "boot-check")
		if err != nil {
			return err
		}
		for _, e := range cache.List() {
			found[e.Claim.UID] = stateOf(e)
		}
		return cache.Close()
	})
	return found, v
}

func (c *claimChecker) reset(dir string) error {
	found, v := c.load(dir)
	if v != nil {
		return v
	}
	c.adopt(found)
	return nil
}

// check: every claim is in the state of its last acknowledged call, or in
// the state the call attempted after it would have left.
func (c *claimChecker) check(dir string) ([]Violation, int, int) {
	acks := c.acks
	found, v := c.load(dir)
	if v != nil {
		return []Violation{*v}, acks, 0
	}
	uids := map[string]bool{}
	for u := range c.model {
		uids[u] = true
	}
	for u := range found {
		uids[u] = true
	}
	var vs []Violation
	for _, uid := range sortedKeys(uids) {
		var acked, pending *claimState
		if s, ok := c.model[uid]; ok {
			acked = &s
		}
		op, tried := c.tried[uid]
		if tried {
			pending = op.next(acked)
		}
		var got *claimState
		if s, ok := found[uid]; ok {
			got = &s
		}
		if sameClaim(got, acked) || (tried && sameClaim(got, pending)) {
			continue
		}
		// A claim acknowledged this run, or found when it started, was
		// changed back; anything else was never written.
		kind := Invented
		if acked != nil || c.seen[uid] {
			kind = Lost
		}
		detail := fmt.Sprintf("found %s, last acknowledged %s", describeClaim(got), describeClaim(acked))
		if tried {
			detail += fmt.Sprintf(", or after the attempted %s %s", op.Op, describeClaim(pending))
		}
		vs = append(vs, Violation{Kind: kind, Key: uid, Detail: detail})
	}
	c.adopt(found)
	return vs, acks, 0
}

func sameClaim(a, b *claimState) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.canon() == b.canon()
}

func describeClaim(s *claimState) string {
	if s == nil {
		return "no entry"
	}
	return s.canon()
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
