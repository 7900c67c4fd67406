package agent

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/dranode/dranode/cdi"
	"github.com/dranode/dranode/checkpoint/durable"
	"github.com/dranode/dranode/checkpoint/kubeletcompat"
	"github.com/dranode/dranode/claimcache"
)

// The results of one sweep, the values of the result label of
// dranode_record_sweeps_total.
const (
	sweepDone = "swept"
	// The kubelet's checkpoint is not where kubelet.draManagerState says:
	// a running kubelet always has one, so the path is wrong (or no
	// kubelet runs); nothing is swept.
	sweepKubeletMissing = "kubelet-checkpoint-missing"
	// The kubelet's checkpoint cannot be read or verified; nothing is
	// swept.
	sweepKubeletUnreadable = "kubelet-checkpoint-unreadable"
)

// sweeper finds and cleans leftover claims (claimcache.LeftoverTracker)
// every cleanup.interval.
type sweeper struct {
	a       *Agent
	m       *sweepMetrics
	tracker claimcache.LeftoverTracker
	skipped string // the result of the last sweep that skipped, "" after one that swept
	// standalone is the agent's mode when the sweeper started: no kubelet,
	// so a missing kubelet checkpoint is expected.
	standalone bool

	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the sweep and waits for one in progress (it calls plugins and
// the record, which Stop closes next).
func (s *sweeper) stop() {
	if s == nil {
		return
	}
	s.cancel()
	<-s.done
}

// runSweeper sweeps at once and then every cleanup.interval until ctx is
// done. The first sweep at start only starts the grace periods (unless a
// leftover's grace period is shorter than the interval).
func (a *Agent) runSweeper(ctx context.Context, s *sweeper) {
	t := time.NewTicker(a.cfg.Cleanup.Interval)
	defer t.Stop()
	for {
		// Only the instance holding the claim record sweeps it.
		if leave, held := a.record.Enter(); held {
			s.sweep(ctx, time.Now())
			leave()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// kubeletUIDs reads the kubelet's DRA checkpoint and returns the UIDs of
// every claim it lists, for any driver: a claim the kubelet tracks is its
// to unprepare, whichever drivers it names.
func (a *Agent) kubeletUIDs() (map[string]bool, error) {
	state, err := kubeletcompat.ReadDRAManagerState(a.cfg.Kubelet.DRAManagerState)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(state.Claims))
	for _, c := range state.Claims {
		out[c.UID] = true
	}
	return out, nil
}

// lookupClaim asks the claim source about a recorded claim's name.
func (a *Agent) lookupClaim(ctx context.Context, ref claimcache.ClaimRef) (claimcache.APIClaim, error) {
	ctx, cancel := context.WithTimeout(ctx, reconcileLookupTimeout)
	defer cancel()
	c, err := a.claims.GetClaim(ctx, ref.Namespace, ref.Name)
	switch {
	case errors.Is(err, ErrClaimNotFound):
		return claimcache.APIClaim{}, nil
	case err != nil:
		return claimcache.APIClaim{}, err
	}
	return claimcache.APIClaim{Exists: true, UID: string(c.UID),
		Reserved: c.Status.Allocation != nil && len(c.Status.ReservedFor) > 0}, nil
}

func (s *sweeper) sweep(ctx context.Context, now time.Time) {
	a := s.a
	rep, err := s.tracker.Find(a.record.Cache(), claimcache.LeftoverSource{
		Kubelet: a.kubeletUIDs,
		Lookup:  func(ref claimcache.ClaimRef) (claimcache.APIClaim, error) { return a.lookupClaim(ctx, ref) },
	}, now, a.cfg.Cleanup.GracePeriod)
	if err != nil {
		result := sweepKubeletUnreadable
		if errors.Is(err, fs.ErrNotExist) {
			result = sweepKubeletMissing
		}
		s.m.sweeps.WithLabelValues(result).Inc()
		s.m.leftovers.Reset()
		switch {
		case s.skipped == result: // once per change: the metric tells the rest
		case s.standalone && result == sweepKubeletMissing:
			// No kubelet, no checkpoint: expected, not an error.
			a.log.Info("Sweep for leftover claims skipped: standalone, no kubelet checkpoint, so nothing is cleaned",
				"path", a.cfg.Kubelet.DRAManagerState, "result", result)
		default:
			a.log.Error(err, "Sweep for leftover claims skipped: without the kubelet's DRA checkpoint a claim in use cannot be told from a leftover, so nothing is cleaned until it can be read",
				"path", a.cfg.Kubelet.DRAManagerState, "result", result)
		}
		s.skipped = result
		return
	}
	if s.skipped != "" {
		a.log.Info("Kubelet DRA checkpoint readable again; sweeping for leftover claims", "path", a.cfg.Kubelet.DRAManagerState)
		s.skipped = ""
	}
	s.m.sweeps.WithLabelValues(sweepDone).Inc()
	for _, err := range rep.Errors {
		s.m.errors.Inc()
		a.log.Error(err, "Checking a recorded claim for the sweep; it is checked again at the next sweep")
	}
	waiting := map[claimcache.LeftoverReason]int{}
	for _, l := range rep.Leftovers {
		if !s.clean(ctx, l, now) {
			waiting[l.Reason]++
		}
	}
	s.m.leftovers.Reset()
	for reason, n := range waiting {
		s.m.leftovers.WithLabelValues(string(reason)).Set(float64(n))
	}
	s.sweepCDIDebris(now)
}

// clean unprepares and removes one leftover claim once its grace period is
// over; it reports false for one that stays (waiting or failed).
func (s *sweeper) clean(ctx context.Context, l claimcache.Leftover, now time.Time) bool {
	a := s.a
	log := a.log.WithValues("claimUID", l.Entry.Claim.UID, "claim", l.Entry.Claim.Namespace+"/"+l.Entry.Claim.Name,
		"reason", string(l.Reason), "state", string(l.Entry.State), "leftoverSince", l.Since)
	if !l.Due {
		log.V(2).Info("Leftover claim in its grace period", "gracePeriod", a.cfg.Cleanup.GracePeriod)
		return false
	}
	e, err := a.record.Cache().CleanLeftover(l,
		func(claimcache.Entry) (bool, error) {
			// Again, under the claim's lock: the kubelet writes its
			// checkpoint before it calls Prepare, so a claim it
			// started to prepare since Find is listed now.
			listed, err := a.kubeletUIDs()
			return err == nil && !listed[l.Entry.Claim.UID], err
		},
		func(e claimcache.Entry) error {
			_, err := a.unprepareDrivers(logr.NewContext(ctx, log), e)
			return err
		})
	switch {
	case err == nil:
		s.tracker.Forget(l.Entry.Claim.UID)
		s.m.cleaned.WithLabelValues(string(l.Reason)).Inc()
		log.Info("Leftover claim cleaned: no kubelet will unprepare it; unprepared through its plugins, CDI specs and record entry removed",
			"drivers", driverNames(e), "after", now.Sub(l.Since).Round(time.Millisecond))
	case errors.Is(err, claimcache.ErrNotFound), errors.Is(err, claimcache.ErrNotLeftover):
		s.tracker.Forget(l.Entry.Claim.UID)
		log.Info("Leftover claim not cleaned: it was unprepared or taken up by the kubelet meanwhile", "why", err.Error())
	default:
		s.m.errors.Inc()
		log.Error(err, "Cleaning a leftover claim; retried at the next sweep")
		return false
	}
	return true
}

// sweepCDIDebris removes, for this agent's drivers, CDI specs of claims
// that are not recorded (checked one by one, at the moment of removal, so
// that a Prepare recording a claim meanwhile keeps its spec: the claim is
// recorded before its spec is written) and temporary files a crashed
// writer left (older than the grace period, so that no write in progress
// loses its file).
func (s *sweeper) sweepCDIDebris(now time.Time) {
	a := s.a
	for _, name := range a.Drivers() {
		removed, err := a.specs.Sweep(name, cdi.ClaimClass, func(uid string) bool {
			_, err := a.record.Cache().Get(uid)
			return !errors.Is(err, claimcache.ErrNotFound)
		})
		if err != nil {
			a.log.Error(err, "Sweeping CDI specs", "driver", name)
		}
		if len(removed) > 0 {
			a.log.Info("Removed CDI specs of unrecorded claims", "driver", name, "files", removed)
		}
	}
	entries, err := os.ReadDir(a.cfg.CDI.Dir)
	if err != nil {
		return // the spec sweep above reported it
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !a.isCDITemp(e.Name()) {
			continue
		}
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) < a.cfg.Cleanup.GracePeriod {
			continue
		}
		path := filepath.Join(a.cfg.CDI.Dir, e.Name())
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			a.log.Error(err, "Removing a temporary CDI spec file left by a crash")
			continue
		}
		a.log.Info("Removed a temporary CDI spec file left by a crash", "file", path, "modified", info.ModTime())
	}
}

// isCDITemp reports whether name is a temporary file of one of this
// agent's per-claim specs (durable.TempPrefix of its spec name).
func (a *Agent) isCDITemp(name string) bool {
	for _, d := range a.Drivers() {
		prefix := durable.TempPrefix(cdi.TransientSpecFileName(d, cdi.ClaimClass, ""))
		// The name is ".<driver>-claim_.json.tmp-": the UID goes
		// between the two halves.
		head, tail, _ := strings.Cut(prefix, ".json")
		if rest, ok := strings.CutPrefix(name, head); ok && strings.Contains(rest, ".json"+tail) {
			return true
		}
	}
	return false
}

// startSweeper registers the sweeper's metrics and runs it in the
// background, unless cleanup.interval is 0.
func (a *Agent) startSweeper(ctx context.Context) error {
	if a.cfg.Cleanup.Interval == 0 {
		a.log.Info("Sweep for leftover claims disabled (cleanup.interval is 0s)")
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &sweeper{a: a, m: newSweepMetrics(), standalone: a.standalone, cancel: cancel, done: make(chan struct{})}
	if err := a.metrics.add(a.opts.Registry, "sweeper's", s.m.collectors()); err != nil {
		return err
	}
	a.log.Info("Sweeping for leftover claims", "interval", a.cfg.Cleanup.Interval, "gracePeriod", a.cfg.Cleanup.GracePeriod,
		"kubeletCheckpoint", a.cfg.Kubelet.DRAManagerState)
	a.sweeper = s
	go func() {
		defer close(s.done)
		a.runSweeper(ctx, s)
	}()
	return nil
}
