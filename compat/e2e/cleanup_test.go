package e2e

import (
	"context"
	"k8s.io/client-go/util/retry"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	drastate "k8s.io/kubernetes/pkg/kubelet/cm/dra/state"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/compat/e2e/harness"
)

// kubeletCheckpointName is the file the kubelet's DRA manager keeps its
// claims in, inside its state directory.
const kubeletCheckpointName = "dra_manager_state"

// forgetInKubeletCheckpoint rewrites the stopped kubelet's DRA checkpoint,
// through the kubelet's own checkpointer, without the claims named: what a
// kubelet that lost track of them (its state replaced, a bug) leaves.
func forgetInKubeletCheckpoint(t *testing.T, dir string, uids ...types.UID) {
	t.Helper()
	cp, err := drastate.NewCheckpointer(dir, kubeletCheckpointName)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := cp.GetOrCreate()
	if err != nil {
		t.Fatal(err)
	}
	list, err := cur.GetClaimInfoStateList()
	if err != nil {
		t.Fatal(err)
	}
	var keep drastate.ClaimInfoStateList
	dropped := 0
	for _, c := range list {
		if slices.Contains(uids, c.ClaimUID) {
			dropped++
			continue
		}
		keep = append(keep, c)
	}
	if dropped != len(uids) {
		t.Fatalf("the kubelet's checkpoint lists %d of the %d claims to forget", dropped, len(uids))
	}
	next, err := drastate.NewCheckpoint(keep)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Store(next); err != nil {
		t.Fatal(err)
	}
}

// counter sums an agent metric over the samples whose label has value.
func (n *node) counter(name, label, value string) float64 {
	n.t.Helper()
	families, err := n.agent.Metrics(n.ctx)
	if err != nil {
		n.t.Fatal(err)
	}
	var sum float64
	if fam := families[name]; fam != nil {
		for _, m := range fam.Metric {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return sum
}

// claimOf returns the pod's generated claim.
func (n *node) claimOf(pod *corev1.Pod) (name string, uid types.UID) {
	n.t.Helper()
	name = pod.Name + "-" + harness.PodClaimName
	c, err := cluster.Client.ResourceV1().ResourceClaims(n.ns).Get(n.ctx, name, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	return name, c.UID
}

// specFiles lists the CDI spec files of a claim UID in the agent's CDI dir.
func (n *node) specFiles(uid types.UID) []string {
	n.t.Helper()
	files, err := filepath.Glob(filepath.Join(n.agent.CDIDir, "*"+string(uid)+"*"))
	if err != nil {
		n.t.Fatal(err)
	}
	return files
}

// Leftovers made on purpose, with the kubelet's own DRA manager and a real
// control plane, are cleaned by the agent's sweep within the grace period;
// a claim the kubelet still lists survives every sweep.
//
//	(a) the agent is killed (SIGKILL) while a Prepare is inside the frozen
//	    plugin, leaving the claim in PrepareStarted (the plugin declares a
//	    Prepare that keeps state: a stateless one is recorded only once
//	    prepared); the pod and its claim are deleted while the agent is
//	    down;
//	(b) a prepared claim is force-deleted from the API server;
//	(c) a prepared claim stays, but its pod is gone (reservedFor empty);
//	(d) a prepared claim and its pod are deleted from the API server, but
//	    the kubelet still has the pod and lists the claim.
//
// The kubelet forgets (a)-(c) — its checkpoint is rewritten without them
// while it is stopped, through its own checkpointer — so no kubelet will
// ever unprepare them.
func TestLeftoversCleaned(t *testing.T) {
	const grace, interval = 2 * time.Second, 200 * time.Millisecond
	n := newNode(t, harness.GPUDriver{DriverName: gpuDriver, NumDevices: 8, PrepareKeepsState: true})
	err := n.agent.PatchConfig(map[string]any{
		"cleanup": map[string]any{"interval": interval.String(), "gracePeriod": grace.String()},
		"kubelet": map[string]any{"draManagerState": filepath.Join(n.KubeletDir(), kubeletCheckpointName)},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.start()
	pods := n.SchedulePods("l", 4)
	podA, podB, podC, podD := pods[0], pods[1], pods[2], pods[3]
	n.PrepareAll(pods[1:])
	uids := map[string]types.UID{}
	names := map[string]string{}
	for k, p := range map[string]*corev1.Pod{"a": podA, "b": podB, "c": podC, "d": podD} {
		names[k], uids[k] = n.claimOf(p)
	}

	// (a): a Prepare inside the frozen plugin when the agent dies.
	plugins, err := n.agent.PluginPIDs()
	if err != nil || len(plugins) != 1 {
		t.Fatalf("plugin processes: %v, %v; want one", plugins, err)
	}
	if err := syscall.Kill(plugins[0], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	prepared := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(n.ctx, 2*time.Minute)
		defer cancel()
		prepared <- n.Kubelet().DRA.PrepareResources(ctx, podA)
	}()
	err = harness.Poll(n.ctx, 20*time.Millisecond, 60*time.Second, "claim (a) recorded", func(context.Context) (bool, error) {
		return n.gauge("dranode_claims_recorded") == 4, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := harness.WaitForQueuedInput(n.ctx, plugins[0], 60*time.Second); err != nil {
		t.Fatal(err) // the call has not reached the frozen plugin
	}
	n.agent.Kill()
	if err := syscall.Kill(plugins[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-prepared; err == nil {
		t.Fatal("the Prepare of (a) succeeded although the agent was killed during it")
	}
	if files := n.specFiles(uids["a"]); len(files) != 0 {
		t.Fatalf("(a) has CDI specs %v: the kill did not land before the plugin answered", files)
	}

	// While the agent is down.
	n.Kubelet().SetActive(podA, false)
	if err := cluster.DeletePod(n.ctx, podA); err != nil { // (a): pod and claim
		t.Fatal(err)
	}
	if err := cluster.DeleteClaim(n.ctx, n.ns, names["b"]); err != nil { // (b)
		t.Fatal(err)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		claimC, err := cluster.Client.ResourceV1().ResourceClaims(n.ns).Get(n.ctx, names["c"], metav1.GetOptions{})
		if err != nil {
			return err
		}
		claimC.Status.ReservedFor = nil // (c): what the resourceclaim controller does when the pod is gone
		_, err = cluster.Client.ResourceV1().ResourceClaims(n.ns).UpdateStatus(n.ctx, claimC, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{podB, podC} {
		n.Kubelet().SetActive(p, false)
		err := cluster.Client.CoreV1().Pods(n.ns).Delete(n.ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := cluster.DeletePod(n.ctx, podD); err != nil { // (d): the kubelet keeps it active
		t.Fatal(err)
	}
	n.StopKubelet()
	forgetInKubeletCheckpoint(t, n.KubeletDir(), uids["a"], uids["b"], uids["c"])
	n.StartKubelet()

	start := time.Now()
	if err := n.agent.Start(); err != nil {
		t.Fatal(err)
	}
	n.WaitRegistered(gpuDriver, n.agent.Process)
	err = harness.Poll(n.ctx, 20*time.Millisecond, 2*time.Minute, "three leftovers cleaned", func(context.Context) (bool, error) {
		return n.gauge("dranode_record_cleaned_claims_total") >= 3, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("time to clean 3 leftovers from the agent's restart: %s (grace period %s, sweep interval %s)",
		time.Since(start).Round(time.Millisecond), grace, interval)

	for reason, want := range map[string]float64{"claim-deleted": 2, "claim-unreserved": 1, "claim-recreated": 0} {
		if got := n.counter("dranode_record_cleaned_claims_total", "reason", reason); got != want {
			t.Errorf("dranode_record_cleaned_claims_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	log := n.agent.Log()
	for k, reason := range map[string]string{"a": "claim-deleted", "b": "claim-deleted", "c": "claim-unreserved"} {
		if !hasLogLine(log, "Leftover claim cleaned", string(uids[k]), reason) {
			t.Errorf("(%s): no log line for cleaning claim %s with reason %s", k, uids[k], reason)
		}
		if files := n.specFiles(uids[k]); len(files) != 0 {
			t.Errorf("(%s): CDI specs left: %v", k, files)
		}
	}

	// (d) survives many sweeps, although the API server has no claim.
	swept := n.counter("dranode_record_sweeps_total", "result", "swept")
	err = harness.Poll(n.ctx, 50*time.Millisecond, 2*time.Minute, "25 more sweeps", func(context.Context) (bool, error) {
		return n.counter("dranode_record_sweeps_total", "result", "swept") >= swept+25, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Client.ResourceV1().ResourceClaims(n.ns).Get(n.ctx, names["d"], metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("claim (d) in the API server: %v, want not found", err)
	}
	if got := n.gauge("dranode_claims_recorded"); got != 1 {
		t.Errorf("claims recorded after the sweeps: %v, want 1 (d)", got)
	}
	if files := n.specFiles(uids["d"]); len(files) != 1 {
		t.Errorf("(d): CDI specs %v, want its one spec", files)
	}
	if hasLogLine(log+n.agent.Log(), "Leftover claim cleaned", string(uids["d"])) {
		t.Errorf("(d) was cleaned although the kubelet lists it")
	}
	// The kubelet still settles (d) itself.
	if err := n.Kubelet().DRA.UnprepareResources(n.ctx, podD); err != nil {
		t.Fatal(err)
	}
	if got := n.gauge("dranode_claims_recorded"); got != 0 {
		t.Errorf("claims recorded after the kubelet unprepared (d): %v, want 0", got)
	}
	if files := n.specFiles(uids["d"]); len(files) != 0 {
		t.Errorf("(d): CDI specs left after the kubelet's unprepare: %v", files)
	}
}

// hasLogLine reports whether one line of log contains every part.
func hasLogLine(log string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return true
		}
	}
	return false
}
