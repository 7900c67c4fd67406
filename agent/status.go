package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"

	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/sliceclient/claimstatus"
)

// The device status (KEP-4817) the plugins return is written to the
// claims' status.devices by a few workers, after the kubelet has its answer:
// a server-side apply is a round trip to the API server that a Prepare need
// not wait for (integration/agent BenchmarkPrepareDeviceStatus: about 15 ms
// on a loaded 2-core machine, as much as the rest of the Prepare). The
// status is informational, so a write the server refuses is counted and
// logged, never turned into a failed Prepare or Unprepare.

const (
	// statusWorkers write concurrently; writes of one claim and driver are
	// never concurrent and keep their order (the work queue's guarantee).
	statusWorkers = 2
	// statusAttempts bounds the tries of a write that failed for a
	// reason that may pass (timeouts, throttling, the server unreachable).
	statusAttempts = 5
	// statusWriteTimeout bounds one write.
	statusWriteTimeout = 10 * time.Second
	// statusDrainTimeout is how long Stop lets queued writes finish.
	statusDrainTimeout = 5 * time.Second
)

// statusKey names one claim's entries of one driver.
type statusKey struct {
	driver string
	uid    types.UID
}

// statusOp is the latest wanted state of a key: the entries to apply, or
// none (clear). A newer op replaces a queued one: only the last matters.
type statusOp struct {
	claim    claimstatus.Claim
	devices  []resourcev1.AllocatedDeviceStatus
	attempts int
}

// statusWriter queues and performs the agent's status writes.
type statusWriter struct {
	rest    rest.Interface
	log     logr.Logger
	queue   workqueue.TypedRateLimitingInterface[statusKey]
	writes  *prometheus.CounterVec // driver, op
	errors  *prometheus.CounterVec // driver, reason
	workers sync.WaitGroup

	mu      sync.Mutex
	pending map[statusKey]*statusOp
	writers map[string]*claimstatus.Writer
	// reported holds the drivers whose plugin returned a status since the
	// agent started: only their unprepares clear entries. After a restart,
	// entries written before it are cleared once the driver reports again,
	// and the API server drops all of them when the claim is deallocated.
	reported map[string]bool
}

func newStatusWriter(rc rest.Interface, log logr.Logger, reg *prometheus.Registry) *statusWriter {
	w := &statusWriter{
		rest: rc,
		log:  log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[statusKey](100*time.Millisecond, 5*time.Second),
			workqueue.TypedRateLimitingQueueConfig[statusKey]{Name: "claim-status"}),
		pending:  map[statusKey]*statusOp{},
		writers:  map[string]*claimstatus.Writer{},
		reported: map[string]bool{},
	}
	w.writes, w.errors = claimStatusMetrics()
	reg.MustRegister(w.writes, w.errors)
	for range statusWorkers {
		w.workers.Add(1)
		go w.work()
	}
	return w
}

// apply queues writing devices as the driver's entries of the claim.
func (w *statusWriter) apply(driver string, claim claimstatus.Claim, devices []resourcev1.AllocatedDeviceStatus) {
	w.mu.Lock()
	w.reported[driver] = true
	w.mu.Unlock()
	w.enqueue(statusKey{driver, claim.UID}, &statusOp{claim: claim, devices: devices})
}

// clear queues removing the driver's entries of the claim, when the driver
// reports status at all.
func (w *statusWriter) clear(driver string, claim claimstatus.Claim) {
	w.mu.Lock()
	reported := w.reported[driver]
	w.mu.Unlock()
	if reported {
		w.enqueue(statusKey{driver, claim.UID}, &statusOp{claim: claim})
	}
}

func (w *statusWriter) enqueue(key statusKey, op *statusOp) {
	w.mu.Lock()
	w.pending[key] = op
	w.mu.Unlock()
	w.queue.Add(key)
}

func (w *statusWriter) work() {
	defer w.workers.Done()
	for {
		key, shutdown := w.queue.Get()
		if shutdown {
			return
		}
		w.write(key)
		w.queue.Done(key)
	}
}

func (w *statusWriter) write(key statusKey) {
	w.mu.Lock()
	op := w.pending[key]
	delete(w.pending, key)
	writer, err := w.writerLocked(key.driver)
	w.mu.Unlock()
	if op == nil {
		return // written by an earlier pass
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusWriteTimeout)
	defer cancel()
	name := "apply"
	if err == nil {
		if len(op.devices) > 0 {
			err = writer.Apply(ctx, op.claim, op.devices)
		} else {
			name = "clear"
			err = writer.Clear(ctx, op.claim)
		}
	}
	log := w.log.WithValues("driver", key.driver, "claim", op.claim.Namespace+"/"+op.claim.Name, "claimUID", op.claim.UID, "op", name)
	if err == nil {
		w.writes.WithLabelValues(key.driver, name).Inc()
		w.queue.Forget(key)
		log.V(3).Info("Claim device status written", "devices", len(op.devices))
		return
	}
	reason := claimstatus.Reason(err)
	w.errors.WithLabelValues(key.driver, reason).Inc()
	op.attempts++
	if retryable(err) && op.attempts < statusAttempts {
		w.mu.Lock()
		if _, newer := w.pending[key]; !newer {
			w.pending[key] = op
		}
		w.mu.Unlock()
		log.V(2).Info("Writing the claim's device status failed, retrying", "reason", reason, "err", err.Error())
		w.queue.AddRateLimited(key)
		return
	}
	w.queue.Forget(key)
	log.Error(err, "Writing the claim's device status failed; the prepare is not affected", "reason", reason, "attempts", op.attempts)
}

func (w *statusWriter) writerLocked(driver string) (*claimstatus.Writer, error) {
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

// retryable: failures that may pass. Refusals (Forbidden, Invalid,
// NotFound, a replaced claim) stay refused.
func retryable(err error) bool {
	if errors.Is(err, claimstatus.ErrInvalid) {
		return false
	}
	switch {
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsNotFound(err), apierrors.IsUnauthorized(err),
		apierrors.IsBadRequest(err), apierrors.IsMethodNotSupported(err):
		return false
	}
	return true
}

// stop lets queued writes finish for up to statusDrainTimeout, then drops
// the rest (the status is informational; the claims stay prepared).
func (w *statusWriter) stop(reg *prometheus.Registry) {
	done := make(chan struct{})
	go func() {
		w.queue.ShutDownWithDrain()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(statusDrainTimeout):
		w.log.Info("Dropping queued claim device status writes at stop", "queued", w.queue.Len())
		w.queue.ShutDown()
	}
	w.workers.Wait()
	reg.Unregister(w.writes)
	reg.Unregister(w.errors)
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
