package agent_test

import (
	"context"
	"errors"
	"k8s.io/client-go/util/retry"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dranode/dranode/agent"
	"github.com/dranode/dranode/agent/config"
	"github.com/dranode/dranode/cdi"
	"github.com/dranode/dranode/tools/envtest"
)

// TestClusterMode runs the agent against a real kube-apiserver: slices are
// published for the node and put back after the kubelet-style wipe, claims
// are read from the API, and unprepare works after the claim is gone.
func TestClusterMode(t *testing.T) {
	restCfg := envtest.StartT(t, &envtest.Environment{})
	client := kubernetes.NewForConfigOrDie(restCfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The agent builds its own client, as it does from a kubeconfig: its
	// scheme knows only the API groups the agent uses, and this test runs
	// all of their calls (the Node for owner references, slices, claims).
	cfg := nodeConfig(t)
	reg := prometheus.NewRegistry()
	a := start(t, cfg, agent.Options{RESTConfig: restCfg, Registry: reg})
	if a.Standalone() {
		t.Fatal("agent with an API client runs standalone")
	}

	selector := metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName + ",spec.driver=" + gpuDriver}
	waitSlices := func(what string) {
		t.Helper()
		for {
			list, err := client.ResourceV1().ResourceSlices().List(ctx, selector)
			if err != nil {
				t.Fatal(err)
			}
			if n := countDevices(list.Items); n == 4 {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: slices with 4 devices never appeared", what)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	waitSlices("first publish")

	// The kubelet deletes its node's slices when it starts.
	if err := client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, selector); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitSlices("after the wipe")
	t.Logf("slices back %s after the wipe", time.Since(start))

	created := createAllocated(t, client, allocated("default", "api-claim", "gpu-1"))
	k := connectKubelet(t, cfg, gpuDriver)
	ids := k.prepare(t, created)
	if len(ids) != 1 || ids[0] != gpuDriver+"/claim="+string(created.UID)+"-gpu-1" {
		t.Fatalf("CDI IDs %q", ids)
	}
	readSpec(t, cfg, gpuDriver, string(created.UID))
	if n := gauge(t, reg, "dranode_claims_recorded"); n != 1 {
		t.Errorf("record holds %v claims after prepare, want 1", n)
	}

	// Force-deleted pod, claim gone: unprepare from the record.
	// The agent writes the device status into the claim after Prepare: a
	// stale object conflicts, as it would for the resourceclaim controller.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.ResourceV1().ResourceClaims("default").Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Allocation = nil
		_, err = client.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := client.ResourceV1().ResourceClaims("default").Delete(ctx, created.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if msg := k.unprepare(t, created); msg != "" {
		t.Fatalf("unprepare without the claim: %s", msg)
	}
	if n := gauge(t, reg, "dranode_claims_recorded"); n != 0 {
		t.Errorf("record holds %v claims after unprepare", n)
	}
}

// TestAPIClaimSource reads claims as the agent does in cluster mode: the
// current object, and ErrClaimNotFound for a claim that does not exist.
func TestAPIClaimSource(t *testing.T) {
	restCfg := envtest.StartT(t, &envtest.Environment{})
	ctx := t.Context()
	created := createAllocated(t, kubernetes.NewForConfigOrDie(restCfg), allocated("default", "read-me", "gpu-0"))
	src, err := agent.NewAPIClaimSource(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := src.GetClaim(ctx, "default", "read-me")
	if err != nil {
		t.Fatal(err)
	}
	if got.UID != created.UID || got.Status.Allocation == nil || got.Status.Allocation.Devices.Results[0].Device != "gpu-0" {
		t.Errorf("read back UID %s, allocation %+v; want UID %s allocated gpu-0", got.UID, got.Status.Allocation, created.UID)
	}
	if _, err := src.GetClaim(ctx, "default", "missing"); !errors.Is(err, agent.ErrClaimNotFound) {
		t.Errorf("GetClaim of a missing claim: %v, want ErrClaimNotFound", err)
	}
}

// createAllocated creates c and then its status, as the scheduler
// allocates a claim that exists.
func createAllocated(t testing.TB, client kubernetes.Interface, c *resourcev1.ResourceClaim) *resourcev1.ResourceClaim {
	t.Helper()
	ctx := context.Background()
	created, err := client.ResourceV1().ResourceClaims(c.Namespace).Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = c.Status
	created, err = client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func countDevices(slices []resourcev1.ResourceSlice) int {
	n := 0
	for _, s := range slices {
		n += len(s.Spec.Devices)
	}
	return n
}

// readSpec loads the claim's CDI spec of the driver as a runtime would.
func readSpec(t *testing.T, cfg config.Config, driver, uid string) *cdi.Spec {
	t.Helper()
	path, ok, err := cdi.SpecDir{Path: cfg.CDI.Dir}.Lookup(driver, cdi.ClaimClass, uid)
	if err != nil || !ok {
		t.Fatalf("CDI spec of claim %s: exists %v, %v", uid, ok, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("CDI spec: %v", err)
	}
	s, err := cdi.DecodeSpec(data)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
