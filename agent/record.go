package agent

import (
	"github.com/dranode/dranode/agent/internal/record"
)

// ErrNotHolder is the hand-over's answer of an instance that does not hold
// the claim record (any more).
var ErrNotHolder = record.ErrNotHolder

// newRecordHolder is the agent's record holder (package
// agent/internal/record): the hand-over's callbacks into the agent are
// recordHooks.
func newRecordHolder(a *Agent) *record.Holder {
	return record.New(record.Config{
		Dir:             a.cfg.ClaimRecordDir(),
		StateDir:        a.cfg.StateDir,
		InstanceID:      a.cfg.Kubelet.InstanceID,
		HandoverTimeout: a.cfg.Kubelet.HandoverTimeout,
		Listen:          listenUnix,
		Log:             a.log,
	}, recordHooks{a})
}

// recordHooks is what the record holder needs of the agent; it runs under
// the record gate's write lock.
type recordHooks struct{ a *Agent }

func (h recordHooks) Stopping() error {
	if h.a.life.stopping.Load() {
		return ErrStopping
	}
	return nil
}

// StopPublishing stops the slice publishers without touching the slices;
// inventory changes wait in each driver's taints for a reclaim.
func (h recordHooks) StopPublishing() {
	a := h.a
	a.drivers.mu.Lock()
	var pubs []interface{ Stop() }
	for _, d := range a.drivers.byName {
		if d.publisher != nil {
			pubs = append(pubs, d.publisher)
			d.publisher = nil
		}
	}
	a.drivers.mu.Unlock()
	for _, p := range pubs {
		p.Stop()
	}
}

func (h recordHooks) ForwardTo(instance string) { h.a.forward.setHolder(instance) }

// Reclaimed settles the record taken back and serves again.
func (h recordHooks) Reclaimed() {
	a := h.a
	a.metrics.upgrade.reclaims.Inc()
	a.logDamage()
	a.finishInterrupted(a.life.ctx)
	a.reconcileUncertain(a.life.ctx)
	for _, d := range a.sortedDrivers() {
		if err := a.startPublisher(a.life.ctx, d); err != nil {
			a.log.Error(err, "Restarting the ResourceSlice publisher", "driver", d.name)
		}
	}
	// The dead instance's sockets go, so that the kubelet deregisters it:
	// while registered, it may be picked again (a reconnect the kubelet
	// began while it died reports it connected for a moment). No instance
	// is starting (the holder holds the start lock): a socket that refuses
	// is a dead instance's.
	for _, d := range a.sortedDrivers() {
		a.removeStaleSockets(d)
	}
}
