package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/dranode/dranode/checkpoint"
	"github.com/dranode/dranode/claimcache"
)

// ErrNotHolder is the hand-over's answer of an instance that does not hold
// the claim record (any more).
var ErrNotHolder = errors.New("this agent instance does not hold the claim record")

// recordHolder is the claim record as this instance holds it. cache and
// report change only under gate's write lock (the hand-over and the
// reclaim replace them); record operations read them under its read lock.
type recordHolder struct {
	gate     recordGate
	cache    *claimcache.Cache
	report   *claimcache.RestoreReport
	handover handover  // the hand-over socket (handover.go)
	released time.Time // when this instance handed the record over; under gate
}

// recordGate says whether this instance holds the claim record. Record
// operations run under its read lock; handing the record over takes the
// write lock, so it waits for those in flight and holds back new ones,
// which then find the record gone and forward.
type recordGate struct {
	mu   sync.RWMutex
	held bool
}

// holdsRecord reports whether this instance holds the claim record.
func (a *Agent) holdsRecord() bool {
	a.record.gate.mu.RLock()
	defer a.record.gate.mu.RUnlock()
	return a.record.gate.held
}

func (a *Agent) recordDir() string { return a.cfg.ClaimRecordDir() }

func (a *Agent) startLockPath() string {
	return filepath.Join(a.cfg.StateDir, startLock)
}

// openRecord opens the claim record. With an instance ID, a record held by
// another instance is asked for over the hand-over socket, for at most
// kubelet.handoverTimeout; the start lock is kept until Start is done
// (endStart).
func (a *Agent) openRecord(ctx context.Context, bootID string) error {
	open := func() error {
		var err error
		a.record.cache, a.record.report, err = claimcache.Open(a.recordDir(), bootID,
			claimcache.WithJournalOptions(checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside)))
		return err
	}
	if a.cfg.Kubelet.InstanceID == "" {
		if err := open(); err != nil {
			return err
		}
		a.record.gate.held = true
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Kubelet.HandoverTimeout)
	defer cancel()
	begin := time.Now()
	var last error
	asked := false
	for wait := 20 * time.Millisecond; ; wait = min(wait*2, 500*time.Millisecond) {
		if a.record.handover.start == nil {
			l, err := checkpoint.TryLock(a.startLockPath())
			switch {
			case err == nil:
				a.record.handover.start = l
			case !errors.Is(err, checkpoint.ErrLocked):
				return err
			default:
				last = fmt.Errorf("another instance is starting (%s is locked)", a.startLockPath())
			}
		}
		if a.record.handover.start != nil {
			err := open()
			if err == nil {
				a.record.gate.held = true
				if asked {
					a.log.Info("Claim record handed over", "took", time.Since(begin))
				}
				return nil
			}
			if !errors.Is(err, checkpoint.ErrLocked) {
				return err
			}
			reply, err := a.askHolder(ctx, handoverRequest{Op: "release", From: a.cfg.Kubelet.InstanceID})
			switch {
			case err != nil:
				last = fmt.Errorf("the claim record is locked and its holder does not answer the hand-over: %w", err)
			case reply.Error != "":
				last = fmt.Errorf("the claim record's holder %s refused the hand-over: %s", reply.Instance, reply.Error)
			case reply.Released:
				asked = true
				a.log.Info("The previous instance released the claim record", "instance", reply.Instance)
				continue
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("opening the claim record: no hand-over within kubelet.handoverTimeout (%s): %w", a.cfg.Kubelet.HandoverTimeout, last)
		case <-time.After(wait):
		}
	}
}

// endStart releases the start lock: this instance serves now.
func (a *Agent) endStart() {
	if a.record.handover.start != nil {
		_ = a.record.handover.start.Unlock()
		a.record.handover.start = nil
	}
}

// release hands the record over: it waits for the record operations in
// flight, holds back new ones (they forward once it is done), stops the
// slice publishers without touching the slices, and closes the record.
func (a *Agent) release(to string) error {
	a.record.gate.mu.Lock()
	defer a.record.gate.mu.Unlock()
	if !a.record.gate.held {
		return ErrNotHolder
	}
	if a.life.stopping.Load() {
		return ErrStopping
	}
	start := time.Now()
	a.drivers.mu.Lock()
	var pubs []interface{ Stop() }
	for _, d := range a.drivers.byName {
		if d.publisher != nil {
			pubs = append(pubs, d.publisher)
			d.publisher = nil // inventory changes wait in d.taints for a reclaim
		}
	}
	a.drivers.mu.Unlock()
	for _, p := range pubs {
		p.Stop()
	}
	err := a.record.cache.Close()
	a.record.gate.held = false
	a.record.released = time.Now()
	a.forward.setHolder(to)
	a.closeHandover()
	a.log.Info("Claim record handed over; forwarding the kubelet's calls from now on", "to", to, "took", time.Since(start))
	go a.watchHolder()
	return err
}

// watchHolder takes the record back when its holder died without a
// successor (a new instance that crashed while starting), even when no
// kubelet call comes to trigger the fallback.
func (a *Agent) watchHolder() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-a.life.ctx.Done():
			return
		case <-t.C:
		}
		if a.life.stopping.Load() || a.reclaim() {
			return
		}
	}
}

// reclaim takes the record back if no other instance holds it or is
// starting; it reports whether this instance holds the record afterwards.
func (a *Agent) reclaim() bool {
	a.record.gate.mu.Lock()
	defer a.record.gate.mu.Unlock()
	if a.record.gate.held {
		return true
	}
	if a.life.stopping.Load() {
		return false
	}
	lock, err := checkpoint.TryLock(a.startLockPath())
	if err != nil {
		return false // another instance is starting: it will serve
	}
	defer lock.Unlock()
	cache, report, err := claimcache.Open(a.recordDir(), a.record.cache.BootID(),
		claimcache.WithJournalOptions(checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside)))
	if err != nil {
		if !errors.Is(err, checkpoint.ErrLocked) {
			a.log.Error(err, "Taking the claim record back")
		}
		return false
	}
	a.record.cache, a.record.report = cache, report
	a.record.gate.held = true
	a.metrics.upgrade.reclaims.Inc()
	since := time.Since(a.record.released)
	a.forward.setHolder("")
	a.log.Info("The instance holding the claim record is gone: took the record back and serve the kubelet's calls myself",
		"claims", cache.Len(), "interrupted", len(report.Interrupted), "handedOverFor", since)
	a.logDamage()
	a.finishInterrupted(a.life.ctx)
	a.reconcileUncertain(a.life.ctx)
	for _, d := range a.sortedDrivers() {
		if err := a.startPublisher(a.life.ctx, d); err != nil {
			a.log.Error(err, "Restarting the ResourceSlice publisher", "driver", d.name)
		}
	}
	if err := a.serveHandover(); err != nil {
		a.log.Error(err, "Serving the hand-over socket again; the next instance will wait for kubelet.handoverTimeout")
	}
	// The dead instance's sockets go, so that the kubelet deregisters it:
	// while registered, it may be picked again (a reconnect the kubelet
	// began while it died reports it connected for a moment). No instance
	// is starting (this one holds the start lock): a socket that refuses
	// is a dead instance's.
	for _, d := range a.sortedDrivers() {
		a.removeStaleSockets(d)
	}
	return true
}

// closeRecord closes the record at Stop.
func (a *Agent) closeRecord() error {
	a.record.gate.mu.Lock()
	defer a.record.gate.mu.Unlock()
	a.record.gate.held = false
	if a.record.cache == nil {
		return nil
	}
	return a.record.cache.Close()
}
