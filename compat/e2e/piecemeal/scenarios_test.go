package piecemeal

import (
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/dranode/dranode/compat/e2e/harness"
	"github.com/dranode/dranode/compat/e2e/scenarios"
)

// 50 pods prepared at once (scenarios.FiftyPods).
func TestFiftyPodsPreparedAndUnprepared(t *testing.T) {
	n := newNode(t, 64)
	n.start()
	scenarios.FiftyPods(t, n)
}

// The kubelet deletes all of the node's slices when it starts; the
// driver's sliceclient publisher notices and puts them back by itself.
func TestSlicesReturnAfterKubeletStartWipe(t *testing.T) {
	n := newNode(t, 8)
	n.startDriver()
	n.waitSlices()
	w, err := cluster.Client.ResourceV1().ResourceSlices().Watch(n.ctx, sliceSelector(n.name))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	n.startKubelet()
	var deletedAt time.Time
	deadline := time.After(60 * time.Second)
	for deletedAt.IsZero() {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Deleted {
				deletedAt = time.Now()
			}
		case <-deadline:
			t.Fatal("the kubelet's start-up wipe deleted no slice of the node in 60s")
		}
	}
	n.waitSlices()
	t.Logf("slices back %v after the kubelet deleted them", time.Since(deletedAt).Round(time.Millisecond))
}

// The driver is killed (SIGKILL) while pods are being prepared and started
// again on the same state directory: the kubelet's plugin manager
// registers it again, the kubelet's retries succeed, and claims prepared
// before the crash keep their CDI IDs (answered from claimcache's record).
// The driver is frozen (SIGSTOP) before those prepares start, so that
// calls are inside it when it dies; the retries counted prove some were.
func TestDriverRestartMidway(t *testing.T) {
	n := newNode(t, 32)
	n.start()
	pods := n.SchedulePods("r", 20)
	n.PrepareAll(pods[:10])
	before := make([][]string, 10)
	for i, p := range pods[:10] {
		before[i] = n.VerifyCDI(p)
	}

	registered := n.Registration(driverName)
	pid := n.driver.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 10)
	attempts := make([]int, 10)
	for i, p := range pods[10:] {
		wg.Go(func() { attempts[i], errs[i] = n.Prepare(p) })
	}
	// A call of the kubelet's has reached the frozen driver; the retry
	// count below says whether the kill landed during calls.
	if err := harness.WaitForQueuedInput(n.ctx, pid, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	n.driver.Kill()
	if err := n.driver.Start(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	retried := 0
	for _, a := range attempts {
		if a > 1 {
			retried++
		}
	}
	if retried == 0 {
		t.Errorf("no prepare needed a retry: the kill did not land during a prepare call")
	} else {
		t.Logf("%d of 10 prepares failed with the driver's crash and succeeded on a retry", retried)
	}
	n.WaitReregistered(driverName, registered, n.driver)
	ids := make([][]string, len(pods))
	seen := map[string]string{}
	for i, p := range pods {
		ids[i] = n.VerifyCDI(p)
		if i < 10 && strings.Join(ids[i], ",") != strings.Join(before[i], ",") {
			t.Errorf("pod %s: CDI IDs changed across the restart: %v, then %v", p.Name, before[i], ids[i])
		}
		for _, id := range ids[i] {
			if other, dup := seen[id]; dup {
				t.Errorf("CDI ID %s handed to both %s and %s", id, other, p.Name)
			}
			seen[id] = p.Name
		}
	}
	n.UnprepareAll(pods, ids)
}

// MarkUnhealthy makes the driver refuse to prepare the pod's device: a
// prepare that succeeds while the mark is there was answered from the
// record.
func (n *node) MarkUnhealthy(pod *corev1.Pod) (unmark func()) {
	n.t.Helper()
	var devices []harness.SimulatedGPU
	for _, dev := range n.allocatedDevices(pod) {
		devices = append(devices, harness.SimulatedGPU{Dir: n.devRoot, Device: dev})
	}
	remove, err := harness.MarkUnhealthy(devices...)
	if err != nil {
		n.t.Fatal(err)
	}
	return func() {
		if err := remove(); err != nil {
			n.t.Fatal(err)
		}
	}
}

// RestartNode stops the kubelet and the driver and starts both again on
// the same directories; with a bootID, as after a reboot: another boot ID
// and an empty CDI directory (/var/run is a tmpfs).
func (n *node) RestartNode(bootID string) {
	n.t.Helper()
	n.StopKubelet()
	n.driver.Stop()
	if bootID != "" {
		n.setBootID(bootID)
		if err := harness.EmptyDir(n.cdiDir); err != nil {
			n.t.Fatal(err)
		}
	}
	n.startDriver()
	n.startKubelet()
}

// A restart in the same boot answers from the record; after a reboot the
// driver prepares again (scenarios.Reboot).
func TestRebootRunsPrepareAgain(t *testing.T) {
	n := newNode(t, 8)
	n.start()
	scenarios.Reboot(t, n)
}

// A force-deleted pod whose claim is gone from the API server is
// unprepared from the record (scenarios.ForceDeletedPod).
func TestForceDeletedPodUnprepares(t *testing.T) {
	n := newNode(t, 8)
	n.start()
	scenarios.ForceDeletedPod(t, n)
}
