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
	a.gate.mu.RLock()
	defer a.gate.mu.RUnlock()
	return a.gate.held
}

func (a *Agent) recordDir() string { return filepath.Join(a.cfg.StateDir, claimRecordDir) }

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
		a.cache, a.report, err = claimcache.Open(a.recordDir(), bootID,
			claimcache.WithJournalOptions(checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside)))
		return err
	}
	if a.cfg.Kubelet.InstanceID == "" {
		if err := open(); err != nil {
			return err
		}
		a.gate.held = true
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Kubelet.HandoverTimeout)
	defer cancel()
	begin := time.Now()
	var last error
	asked := false
	for wait := 20 * time.Millisecond; ; wait = min(wait*2, 500*time.Millisecond) {
		if a.handover.start == nil {
			l, err := checkpoint.TryLock(a.startLockPath())
			switch {
			case err == nil:
				a.handover.start = l
			case !errors.Is(err, checkpoint.ErrLocked):
				return err
			default:
				last = fmt.Errorf("another instance is starting (%s is locked)", a.startLockPath())
			}
		}
		if a.handover.start != nil {
			err := open()
			if err == nil {
				a.gate.held = true
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
	if a.handover.start != nil {
		_ = a.handover.start.Unlock()
		a.handover.start = nil
	}
}

// release hands the record over: it waits for the record operations in
// flight, holds back new ones (they forward once it is done), stops the
// slice publishers without touching the slices, and closes the record.
func (a *Agent) release(to string) error {
	a.gate.mu.Lock()
	defer a.gate.mu.Unlock()
	if !a.gate.held {
		return ErrNotHolder
	}
	if a.stopping.Load() {
		return ErrStopping
	}
	start := time.Now()
	a.mu.Lock()
	var pubs []interface{ Stop() }
	for _, d := range a.drivers {
		if d.publisher != nil {
			pubs = append(pubs, d.publisher)
			d.publisher = nil // inventory changes wait in d.taints for a reclaim
		}
	}
	a.mu.Unlock()
	for _, p := range pubs {
		p.Stop()
	}
	err := a.cache.Close()
	a.gate.held = false
	a.handover.mu.Lock()
	a.handover.target = to
	a.handover.released = time.Now()
	a.handover.mu.Unlock()
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
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
		if a.stopping.Load() || a.reclaim() {
			return
		}
	}
}

// reclaim takes the record back if no other instance holds it or is
// starting; it reports whether this instance holds the record afterwards.
func (a *Agent) reclaim() bool {
	a.gate.mu.Lock()
	defer a.gate.mu.Unlock()
	if a.gate.held {
		return true
	}
	if a.stopping.Load() {
		return false
	}
	lock, err := checkpoint.TryLock(a.startLockPath())
	if err != nil {
		return false // another instance is starting: it will serve
	}
	defer lock.Unlock()
	cache, report, err := claimcache.Open(a.recordDir(), a.cache.BootID(),
		claimcache.WithJournalOptions(checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside)))
	if err != nil {
		if !errors.Is(err, checkpoint.ErrLocked) {
			a.log.Error(err, "Taking the claim record back")
		}
		return false
	}
	a.cache, a.report = cache, report
	a.gate.held = true
	a.upgrade.reclaims.Inc()
	a.handover.mu.Lock()
	since := time.Since(a.handover.released)
	a.handover.target = ""
	a.handover.mu.Unlock()
	a.log.Info("The instance holding the claim record is gone: took the record back and serve the kubelet's calls myself",
		"claims", cache.Len(), "interrupted", len(report.Interrupted), "handedOverFor", since)
	a.logDamage()
	a.finishInterrupted(a.ctx)
	a.reconcileUncertain(a.ctx)
	for _, d := range a.sortedDrivers() {
		if err := a.startPublisher(a.ctx, d); err != nil {
			a.log.Error(err, "Restarting the ResourceSlice publisher", "driver", d.name)
		}
	}
	if err := a.serveHandover(); err != nil {
		a.log.Error(err, "Serving the hand-over socket again; the next instance will wait for kubelet.handoverTimeout")
	}
	return true
}
