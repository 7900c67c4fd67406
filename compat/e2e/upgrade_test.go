package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"

	"github.com/dranode/dranode/compat/e2e/harness"
)

// load makes the kubelet's DRA manager prepare and unprepare the pods'
// claims in a loop, each call once, without the pod workers' retries: a
// call that fails is counted, not hidden. pause holds it between calls.
type load struct {
	n                 *node
	pods              []*corev1.Pod
	pause             sync.RWMutex
	stop              chan struct{}
	stopOnce          sync.Once
	done              sync.WaitGroup
	prepares, unpreps atomic.Int64
	failed            atomic.Int64
	mu                sync.Mutex
	failures          []string
}

func startLoad(n *node, pods []*corev1.Pod, workers int) *load {
	l := &load{n: n, pods: pods, stop: make(chan struct{})}
	next := make(chan *corev1.Pod)
	go func() {
		for i := 0; ; i++ {
			select {
			case next <- pods[i%len(pods)]:
			case <-l.stop:
				close(next)
				return
			}
		}
	}()
	for range workers {
		l.done.Go(func() {
			for p := range next {
				l.cycle(p)
			}
		})
	}
	return l
}

// cycle starts the pod (prepare) and stops it (unprepare), as the kubelet
// does for a pod that comes and goes.
func (l *load) cycle(p *corev1.Pod) {
	// The kubelet is looked up under the pause lock: a test restarts it
	// while the load is paused.
	l.pause.RLock()
	k := l.n.Kubelet()
	k.SetActive(p, true)
	err := k.DRA.PrepareResources(l.n.ctx, p)
	l.pause.RUnlock()
	l.prepares.Add(1)
	l.record("prepare", p, err)
	if err != nil {
		return
	}
	l.pause.RLock()
	k = l.n.Kubelet()
	k.SetActive(p, false)
	err = k.DRA.UnprepareResources(l.n.ctx, p)
	l.pause.RUnlock()
	l.unpreps.Add(1)
	l.record("unprepare", p, err)
}

func (l *load) record(what string, p *corev1.Pod, err error) {
	if err == nil {
		return
	}
	l.failed.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures = append(l.failures, fmt.Sprintf("%s %s: %v", what, p.Name, err))
}

// halt stops the load and waits for its calls in flight.
func (l *load) halt() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.done.Wait()
}

// finish stops the load and fails the test for every failed call.
func (l *load) finish(t *testing.T) {
	t.Helper()
	l.halt()
	t.Logf("calls through the kubelet's DRA manager: %d prepares, %d unprepares, %d failed", l.prepares.Load(), l.unpreps.Load(), l.failed.Load())
	for _, f := range l.failures {
		t.Errorf("failed call: %s", f)
	}
}

// waitCalls waits until the load made n more calls than when it was asked.
func (l *load) waitCalls(t *testing.T, n int64) {
	t.Helper()
	want := l.prepares.Load() + l.unpreps.Load() + n
	err := harness.Poll(l.n.ctx, 20*time.Millisecond, 2*time.Minute, fmt.Sprintf("%d calls", n), func(context.Context) (bool, error) {
		return l.prepares.Load()+l.unpreps.Load() >= want, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// upgradeNode starts a node whose agent runs as instance "instance-1", 50
// scheduled pods and the load on them.
func upgradeNode(t *testing.T) (*node, *load) {
	n := newNodeWith(t, func(o *harness.AgentOptions) { o.InstanceID = "instance-1" },
		harness.GPUDriver{DriverName: gpuDriver, NumDevices: 50})
	n.start()
	pods := n.Schedule("up", 50, n.ensureTemplate())
	l := startLoad(n, pods, 8)
	t.Cleanup(l.halt) // before the node's cleanups, also when the test stops early
	l.waitCalls(t, 50)
	return n, l
}

func sliceWrites(t *testing.T, node string) (int, []string) {
	t.Helper()
	events, err := cluster.Env.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	return harness.SliceWrites(events, node)
}

// The rolling upgrade: while the kubelet prepares and unprepares the
// claims of 50 pods, a second instance starts (another instance ID), takes
// the claim record over and registers, and the first is stopped with
// SIGTERM. No call fails, and no ResourceSlice is written.
func TestRollingUpgradeNoFailedCalls(t *testing.T) {
	n, l := upgradeNode(t)
	writesBefore, _ := sliceWrites(t, n.name)
	if writesBefore == 0 {
		t.Fatal("the audit log has no ResourceSlice write for the node, not even the first publish: the count below would prove nothing")
	}

	start := time.Now()
	next := startInstance(t, n, "instance-2")
	t.Logf("second instance ready (holds the record, registered) %s after its start", time.Since(start).Round(time.Millisecond))
	for _, line := range strings.Split(n.agent.Log(), "\n") {
		if strings.Contains(line, "Claim record handed over") {
			t.Logf("first instance: %s", line[strings.Index(line, "Claim record"):])
		}
	}
	if ready, _ := n.agent.Ready(n.ctx); ready {
		t.Error("the first instance is still ready after handing the record over")
	}
	l.waitCalls(t, 100) // calls reach both instances now
	old, err := n.agent.Metrics(n.ctx)
	if err != nil {
		t.Fatal(err)
	}
	forwarded := counterSum(old, "dranode_forwarded_calls_total")
	t.Logf("calls the first instance received and forwarded after the hand-over: %v", forwarded)
	if forwarded == 0 {
		t.Error("the kubelet called only the new instance: the parallel use of both is not exercised")
	}
	n.agent.Stop() // SIGTERM, as the DaemonSet controller deletes the old pod
	l.waitCalls(t, 100)
	l.finish(t)

	writes, what := sliceWrites(t, n.name)
	t.Logf("ResourceSlice writes during the upgrade: %d", writes-writesBefore)
	if writes != writesBefore {
		t.Errorf("%d ResourceSlice writes during the upgrade, want 0: %v", writes-writesBefore, what[writesBefore:])
	}
	m, err := next.Metrics(n.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if held := m["dranode_record_held"]; held == nil || held.Metric[0].GetGauge().GetValue() != 1 {
		t.Errorf("dranode_record_held of the second instance: %v, want 1", held)
	}
}

// Fallback: the new instance is killed (SIGKILL) after it took the record
// over; the kubelet falls back to the old instance, which finds the record
// free, takes it back and answers every call.
func TestUpgradeNewInstanceKilledFallsBack(t *testing.T) {
	n, l := upgradeNode(t)
	// A pod UID, as the chart gives: a killed instance's registration
	// socket is recognised by it, and removed.
	next := startInstance(t, n, "6f2d1c9e-3b4a-4e5f-8a7b-000000000002")
	l.waitCalls(t, 100)
	plugins := n.Kubelet().DRA.GetWatcherHandler().(*draplugin.DRAPluginManager)
	newest, err := plugins.GetPlugin(gpuDriver)
	if err != nil {
		t.Fatal(err)
	}

	// A call in flight on the instance that is killed fails at the
	// kubelet (its pod worker retries it); the kill is made between calls
	// so that every call counted here is one the kubelet made to a
	// registered instance.
	l.pause.Lock()
	next.Kill()
	<-next.Exited()
	err = harness.Poll(n.ctx, 10*time.Millisecond, time.Minute, "the kubelet to fall back to the old instance", func(context.Context) (bool, error) {
		p, err := plugins.GetPlugin(gpuDriver)
		return err == nil && p != newest, nil
	})
	if err == nil {
		// Until the kubelet forgets the killed instance, it may pick it
		// again: a reconnect it began while the instance died reports it
		// connected for a moment. The old instance removes the killed
		// one's sockets once it took the record back.
		ctx, cancel := context.WithTimeout(n.ctx, time.Minute)
		err = n.Kubelet().WaitEndpoints(ctx, gpuDriver, 1)
		cancel()
	}
	l.pause.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	l.waitCalls(t, 200)
	l.finish(t)
	if err := n.agent.WaitReady(n.ctx, time.Minute); err != nil {
		t.Errorf("the old instance did not take the record back: %v", err)
	}
	m, err := n.agent.Metrics(n.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := m["dranode_record_reclaims_total"]; r == nil || r.Metric[0].GetCounter().GetValue() != 1 {
		t.Errorf("dranode_record_reclaims_total of the old instance: %v, want 1", r)
	}
}

func counterSum(m map[string]*dto.MetricFamily, name string) float64 {
	var sum float64
	if f := m[name]; f != nil {
		for _, s := range f.Metric {
			sum += s.GetCounter().GetValue()
		}
	}
	return sum
}

// startInstance starts another instance of the node's agent and waits
// until it is ready (holds the record, registered).
func startInstance(t *testing.T, n *node, id string) *harness.Agent {
	t.Helper()
	a, err := n.agent.NewInstance(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	if err := a.WaitReady(n.ctx, 2*time.Minute); err != nil {
		t.Fatalf("%s: %v\n%s", id, err, a.LogTail(30))
	}
	return a
}

// Three instances in a row, and the kubelet restarted while all three run
// (it registers them in random order, so any may be "most recent"): every
// call succeeds whichever instance the kubelet picks, and stopping the two
// old ones leaves the third serving.
func TestUpgradeThreeInstancesAndKubeletRestart(t *testing.T) {
	n, l := upgradeNode(t)
	second := startInstance(t, n, "instance-2")
	l.waitCalls(t, 50)
	third := startInstance(t, n, "instance-3")
	l.waitCalls(t, 50)
	if ready, _ := second.Ready(n.ctx); ready {
		t.Error("instance-2 is still ready after handing the record to instance-3")
	}

	l.pause.Lock()
	n.StopKubelet()
	n.StartKubelet()
	n.WaitRegistered(gpuDriver, third.Process)
	l.pause.Unlock()
	l.waitCalls(t, 100)

	// After a restart the kubelet may prefer an old instance (random
	// registration order) until its plugin watcher sees that instance's
	// registration socket go; it then closes its own connection, and a
	// call it has in flight on it fails (Canceled, on the kubelet's
	// side). The old instances are stopped between calls here: each keeps
	// answering (forwarding) for unregisterGrace after its registration
	// socket is gone, which the kubelet's reconciler needs to move on.
	l.pause.Lock()
	n.agent.Stop()
	second.Stop()
	l.pause.Unlock()
	l.waitCalls(t, 100)
	l.finish(t)
	if err := third.WaitReady(n.ctx, time.Minute); err != nil {
		t.Error(err)
	}
}

// A new instance that fails its start after it took the record over (here:
// a kubeconfig that does not exist) releases the record by exiting; the old
// instance takes it back, and no call fails.
func TestUpgradeNewInstanceFailsStart(t *testing.T) {
	n, l := upgradeNode(t)
	bad, err := n.agent.NewInstance("instance-2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bad.Stop)
	if err := bad.PatchConfig(map[string]any{"kubeconfig": "/nonexistent/kubeconfig"}); err != nil {
		t.Fatal(err)
	}
	if err := bad.Start(); err != nil {
		t.Fatal(err)
	}
	<-bad.Exited()
	if !strings.Contains(bad.Log(), "The previous instance released the claim record") {
		t.Fatalf("the failing instance did not take the record over first:\n%s", bad.LogTail(20))
	}
	l.waitCalls(t, 100)
	l.finish(t)
	if err := n.agent.WaitReady(n.ctx, time.Minute); err != nil {
		t.Errorf("the old instance did not take the record back: %v", err)
	}
	m, err := n.agent.Metrics(n.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := counterSum(m, "dranode_record_reclaims_total"); got != 1 {
		t.Errorf("dranode_record_reclaims_total of the old instance: %v, want 1", got)
	}
}
