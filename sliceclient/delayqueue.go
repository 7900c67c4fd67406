package sliceclient

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// delayQueue is the publisher's work queue with delayed adds: client-go's
// plain queue, with one timer per pool that waits to be added and no timer
// at all when none waits.
//
// client-go's own delaying queue runs a loop that wakes every 10 s even
// when nothing waits (its "heartbeat"): the most frequent wake-up of a
// node's agent at rest, an eighth to a sixth of its CPU there
// (compat/fleet/README.md, "The publisher's 10-s wake-up removed").
type delayQueue struct {
	workqueue.TypedInterface[string]

	mu      sync.Mutex
	waiting map[string]*delayed
	stopped bool
}

// delayed is a pool that waits to be added, and when.
type delayed struct {
	at    time.Time
	timer *time.Timer
}

// newDelayQueue returns a delay queue named name for client-go's workqueue
// metrics (reported only when the process registers a metrics provider).
func newDelayQueue(name string) *delayQueue {
	return &delayQueue{
		TypedInterface: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: name}),
		waiting:        map[string]*delayed{},
	}
}

// AddAfter adds pool once d has passed, or at once if d is not positive.
// A pool that already waits is added at the earlier of the two times, as
// client-go's delaying queue does: a later AddAfter does not put off an
// earlier one.
func (q *delayQueue) AddAfter(pool string, d time.Duration) {
	if d <= 0 {
		q.Add(pool)
		return
	}
	at := time.Now().Add(d)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return
	}
	if w, ok := q.waiting[pool]; ok {
		if !at.Before(w.at) {
			return
		}
		w.timer.Stop()
	}
	w := &delayed{at: at}
	w.timer = time.AfterFunc(d, func() { q.ready(pool, w) })
	q.waiting[pool] = w
}

// ready adds a pool whose wait ended, unless an earlier AddAfter replaced
// its wait or the queue shut down.
func (q *delayQueue) ready(pool string, w *delayed) {
	q.mu.Lock()
	current := q.waiting[pool] == w && !q.stopped
	if current {
		delete(q.waiting, pool)
	}
	q.mu.Unlock()
	if current {
		q.Add(pool)
	}
}

// ShutDown stops the waits and shuts the queue down.
func (q *delayQueue) ShutDown() {
	q.stopWaits()
	q.TypedInterface.ShutDown()
}

// ShutDownWithDrain stops the waits and shuts the queue down once the
// pools being synced are done.
func (q *delayQueue) ShutDownWithDrain() {
	q.stopWaits()
	q.TypedInterface.ShutDownWithDrain()
}

func (q *delayQueue) stopWaits() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	for pool, w := range q.waiting {
		w.timer.Stop()
		delete(q.waiting, pool)
	}
}
