package agent

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/client-go/rest"

	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/sliceclient/claimstatus"
)

// The device status (KEP-4817) the plugins return is written to the
// claims' status.devices in the background, by sliceclient/claimstatus's
// Queue, so that it costs the kubelet's calls nothing:
//
//   - never on the call's path: a server-side apply is a round trip to the
//     API server that a Prepare need not wait for
//     (integration/agent BenchmarkPrepareDeviceStatus: about 15 ms on a
//     loaded 2-core machine, as much as the rest of the Prepare);
//   - yielding to the kubelet: the worker writes only once no
//     NodePrepareResources or NodeUnprepareResources call has been in
//     flight for the queue's quiet period (claimstatus.DefaultQuiet), or
//     after its MaxYield under constant load. The kubelet's calls for a
//     burst of pods come one after another; waiting only for "none in
//     flight" let a write into every gap between two of them, and on a
//     node that shares its cores with the API server the next prepare
//     waited behind it (compat/drabench);
//   - coalesced per claim: only the newest unsent intent of a claim and
//     driver is kept;
//   - no write the API server would make pointless: an Unprepare only drops
//     the claim's unsent apply. The kubelet unprepares a claim once no pod
//     on the node uses it, the resourceclaim controller then deallocates it,
//     and the API server drops the status.devices entries of deallocated
//     devices itself (v1.37, dropDeallocatedStatusDevices), so clearing
//     them was a second write per claim for nothing. A claim prepared and
//     unprepared before its status went out costs no write at all.
//
// The status is informational, so a write the server refuses is counted
// and logged, never turned into a failed Prepare or Unprepare.

const (
	// statusWorkers: one keeps the writes low priority; they are few
	// (at most one per claim) and short.
	statusWorkers = 1
	// statusAttempts bounds the tries of a write that failed for a
	// reason that may pass (timeouts, throttling, the server unreachable).
	statusAttempts = 5
	// statusWriteTimeout bounds one write.
	statusWriteTimeout = 10 * time.Second
	// statusDrainTimeout is how long Stop lets queued writes finish.
	statusDrainTimeout = 5 * time.Second
)

// statusWriter queues the agent's status writes.
type statusWriter struct {
	rest   rest.Interface
	log    logr.Logger
	queue  *claimstatus.Queue
	calls  claimstatus.Calls
	writes *prometheus.CounterVec // driver, op
	errors *prometheus.CounterVec // driver, reason

	mu      sync.Mutex
	writers map[string]*claimstatus.Writer
}

func newStatusWriter(rc rest.Interface, log logr.Logger, reg *prometheus.Registry) *statusWriter {
	w := &statusWriter{
		rest:    rc,
		log:     log,
		writers: map[string]*claimstatus.Writer{},
	}
	w.writes, w.errors = claimStatusMetrics()
	w.queue = claimstatus.NewQueue(claimstatus.QueueOptions{
		Workers: statusWorkers, MaxAttempts: statusAttempts, Timeout: statusWriteTimeout,
		Calls: &w.calls, Result: w.result,
	})
	reg.MustRegister(w.writes, w.errors)
	return w
}

// apply queues writing devices as the driver's entries of the claim.
func (w *statusWriter) apply(driver string, claim claimstatus.Claim, devices []resourcev1.AllocatedDeviceStatus) {
	cw, err := w.writer(driver)
	if err != nil {
		w.errors.WithLabelValues(driver, claimstatus.Reason(err)).Inc()
		w.log.Error(err, "Writing the claim's device status failed; the prepare is not affected", "driver", driver)
		return
	}
	w.queue.Apply(cw, claim, devices)
}

// clear is what an Unprepare does with the driver's entries of the claim:
// drop its unsent apply, write nothing (the API server drops the entries
// when the claim is deallocated; see above).
func (w *statusWriter) clear(driver string, claim claimstatus.Claim) {
	w.mu.Lock()
	cw := w.writers[driver]
	w.mu.Unlock()
	if cw != nil && w.queue.Forget(cw, claim.UID) {
		w.log.V(3).Info("Claim unprepared before its device status was written; not writing it", "driver", driver, "claimUID", claim.UID)
	}
}

func (w *statusWriter) result(r claimstatus.Result) {
	log := w.log.WithValues("driver", r.Driver, "claim", r.Claim.Namespace+"/"+r.Claim.Name, "claimUID", r.Claim.UID, "op", r.Op)
	if r.Err == nil {
		w.writes.WithLabelValues(r.Driver, r.Op).Inc()
		log.V(3).Info("Claim device status written", "devices", r.Devices)
		return
	}
	reason := claimstatus.Reason(r.Err)
	w.errors.WithLabelValues(r.Driver, reason).Inc()
	if r.Retry {
		log.V(2).Info("Writing the claim's device status failed, retrying", "reason", reason, "err", r.Err.Error())
		return
	}
	log.Error(r.Err, "Writing the claim's device status failed; the prepare is not affected", "reason", reason, "attempts", r.Attempts)
}

func (w *statusWriter) writer(driver string) (*claimstatus.Writer, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cw, ok := w.writers[driver]; ok {
		return cw, nil
	}
	cw, err := claimstatus.New(claimstatus.Options{REST: w.rest, DriverName: driver})
	if err != nil {
		return nil, err
	}
	w.writers[driver] = cw
	return cw, nil
}

// stop lets queued writes finish for up to statusDrainTimeout, then drops
// the rest (the status is informational; the claims stay prepared).
func (w *statusWriter) stop(reg *prometheus.Registry) {
	ctx, cancel := context.WithTimeout(context.Background(), statusDrainTimeout)
	defer cancel()
	if n := w.queue.Stop(ctx); n > 0 {
		w.log.Info("Dropped queued claim device status writes at stop", "queued", n)
	}
	reg.Unregister(w.writes)
	reg.Unregister(w.errors)
}

// callBegin and callEnd bracket a kubelet call: status writes wait while
// calls are in flight.
func (a *Agent) callBegin() {
	if a.status != nil {
		a.status.calls.Begin()
	}
}

func (a *Agent) callEnd() {
	if a.status != nil {
		a.status.calls.End()
	}
}

// deviceStatuses are the statuses the plugin returned, completed with the
// device's identity as recorded (prepared[i] became recorded[i]).
func deviceStatuses(driver string, prepared []pluginmgr.PreparedDevice, recorded []claimcache.Device) []resourcev1.AllocatedDeviceStatus {
	var out []resourcev1.AllocatedDeviceStatus
	for i, p := range prepared {
		if p.Status == nil || i >= len(recorded) {
			continue
		}
		st := *p.Status
		st.Driver, st.Pool, st.Device, st.ShareID = driver, recorded[i].Pool, recorded[i].Device, nil
		if id := recorded[i].ShareID; id != "" {
			st.ShareID = &id
		}
		out = append(out, st)
	}
	return out
}
