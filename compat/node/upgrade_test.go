package node_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// TestRollingUpgradeWhilePodsComeAndGo upgrades the agent the way the chart
// ships it — a change of the DaemonSet's pod template, rolled out with
// maxSurge: 1, maxUnavailable: 0, so the new pod starts beside the old one,
// which is stopped once the new one is Ready — while 30 pods with claims are
// started and deleted, at most 10 at a time: the first 10 start before the
// upgrade, and at least 10 after it (the rollout takes about 10 s, a pod's
// round trip on this node much longer), so that the old agent's claims are
// unprepared by the new one and the new one prepares claims of its own
// while others come and go. No Prepare or Unprepare may
// fail (the kubelet's events and log say so), and the ResourceSlices are
// not written at all during the upgrade (the API server's audit log).
func TestRollingUpgradeWhilePodsComeAndGo(t *testing.T) {
	const churnPods = 30
	c := startCluster(t, gpus(12))
	c.applySample(claimTemplateSample)
	old := c.agentPod()
	kubeletLogStart := fileSize(t, c.node.Dir()+"/kubelet.log")

	churnCtx, stopChurn := context.WithCancel(c.ctx)
	defer stopChurn()
	started := make(chan struct{}, 64)
	churnDone := make(chan error, 1)
	go func() { churnDone <- churn(churnCtx, c.client, churnPods, 10, started) }()
	for range 10 {
		select {
		case <-started:
		case err := <-churnDone:
			t.Fatalf("churn ended before the upgrade: %v", err)
		}
	}

	writesBefore := c.sliceWrites()
	upgradeStart := time.Now()
	c.restartDaemonSet()
	var last string
	fresh := c.eventually("the new agent pod Ready and the old one gone", func() (*corev1.Pod, bool) {
		pods, err := c.client.CoreV1().Pods(agentNS).List(c.ctx, metav1.ListOptions{})
		if err != nil {
			last = err.Error()
			return nil, false
		}
		var cur *corev1.Pod
		oldThere := false
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.UID == old.UID {
				oldThere = true
			} else if podReady(p) {
				cur = p
			}
		}
		last = fmt.Sprintf("old there: %v, new ready: %v", oldThere, cur != nil)
		return cur, cur != nil && !oldThere
	}, func() string { return last })
	upgrade := time.Since(upgradeStart)
	writes := c.sliceWrites() - writesBefore
	t.Logf("agent pod %s replaced by %s in %s; ResourceSlice writes during the upgrade: %d", old.Name, fresh.Name, upgrade.Round(time.Millisecond), writes)
	if writes != 0 {
		t.Errorf("%d ResourceSlice writes during the upgrade, want 0", writes)
	}

	startedDuring := len(started)
	if err := <-churnDone; err != nil {
		t.Fatalf("pods with claims during the upgrade: %v", err)
	}
	startedAfter := len(started) - startedDuring
	t.Logf("pods started: 10 before the upgrade, %d during it, %d after", startedDuring, startedAfter)
	if startedAfter < 10 {
		t.Errorf("only %d of the %d pods started after the upgrade, want at least 10: the churn no longer shows the new agent at work", startedAfter, churnPods)
	}
	c.waitNoSpecs("every claim unprepared")
	c.waitRecorded(0)
	c.checkNoFailedDRACalls(kubeletLogStart)
}

// churn starts n pods with claims, at most width at a time: each is created,
// waited for until Running, deleted and waited for until gone. It reports
// each start on started.
func churn(ctx context.Context, client kubernetes.Interface, n, width int, started chan<- struct{}) error {
	sem := make(chan struct{}, width)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := oneClaimPod(ctx, client, fmt.Sprintf("churn-%02d", i), started); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func oneClaimPod(ctx context.Context, client kubernetes.Interface, name string, started chan<- struct{}) error {
	p := workloadPodSpec(name)
	if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	var last string
	if _, err := watchPod(ctx, client, "default", name, func(p *corev1.Pod) bool {
		if p == nil {
			last = "no such pod"
			return false
		}
		last = string(p.Status.Phase)
		return p.Status.Phase == corev1.PodRunning
	}); err != nil {
		return fmt.Errorf("%s not Running (last: %s): %w", name, last, err)
	}
	started <- struct{}{}
	if err := client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if _, err := watchPod(ctx, client, "default", name, func(p *corev1.Pod) bool { return p == nil }); err != nil {
		return fmt.Errorf("%s not gone: %w", name, err)
	}
	return nil
}

// restartDaemonSet changes the pod template as an upgrade does (as
// kubectl rollout restart does it).
func (c *cluster) restartDaemonSet() {
	c.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"dranode.test/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := c.client.AppsV1().DaemonSets(agentNS).Patch(c.ctx, "dranode-dranode", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// sliceWrites counts the writes to ResourceSlices in the audit log.
func (c *cluster) sliceWrites() int {
	c.t.Helper()
	events, err := c.env.AuditEvents()
	if err != nil {
		c.t.Fatal(err)
	}
	n := 0
	for _, e := range events {
		if e.ObjectRef != nil && e.ObjectRef.Resource == "resourceslices" && e.Write() {
			n++
		}
	}
	return n
}

// draFailure is a kubelet log line about a failed DRA call.
var draFailure = regexp.MustCompile(`^E.*(?i:prepare dynamic resources|NodePrepareResources|NodeUnprepareResources|DRA driver [^ ]+ is not registered)`)

// heldByChurn is the agent's refusal of a device that an earlier churn
// pod's claim still holds (issue 41). The churn deletes a pod and creates
// the next at once; the resourceclaim controller deallocates the claim
// when the pod is gone, while the kubelet unprepares it in the pod's
// termination, a moment later: the scheduler gives the device to the new
// claim in between, and the agent refuses it until the old claim is
// unprepared. The kubelet retries, and the churn waits for every pod to
// run, so these refusals are the rule at work, not the upgrade failing.
var heldByChurn = regexp.MustCompile(`device gpu\.example\.com/\S+ is in use by claim default/churn-\d+-gpu-\w+ \(uid [0-9a-f-]+, prepared\)`)

// checkNoFailedDRACalls looks at what the kubelet says of its calls to the
// agent: no FailedPrepareDynamicResources event, no error line about DRA
// in its log since offset, but for the refusals of a device an earlier
// churn claim holds (heldByChurn), which are counted.
func (c *cluster) checkNoFailedDRACalls(offset int64) {
	c.t.Helper()
	events, err := c.client.CoreV1().Events("default").List(c.ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	held := 0
	for _, e := range events.Items {
		if !strings.Contains(e.Reason, "Prepare") && !strings.Contains(e.Reason, "DynamicResources") {
			continue
		}
		if heldByChurn.MatchString(e.Message) {
			held++
			continue
		}
		c.t.Errorf("kubelet event %s on %s: %s", e.Reason, e.InvolvedObject.Name, e.Message)
	}
	raw, err := os.ReadFile(c.node.Dir() + "/kubelet.log")
	if err != nil {
		c.t.Fatal(err)
	}
	for _, l := range strings.Split(string(raw[offset:]), "\n") {
		if draFailure.MatchString(l) && !heldByChurn.MatchString(l) {
			c.t.Errorf("kubelet: %s", l)
		}
	}
	c.t.Logf("refusals of a device an earlier churn claim still held, retried by the kubelet: %d events", held)
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
