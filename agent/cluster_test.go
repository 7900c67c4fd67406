package agent

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

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
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The agent builds its own client, as it does from a kubeconfig: its
	// scheme knows only the API groups the agent uses, and this test runs
	// all of their calls (the Node for owner references, slices, claims).
	e := newTestEnv(t, gpuDriver)
	a := e.start(t, Options{RESTConfig: restCfg})
	if a.Standalone() {
		t.Fatal("agent with an API client runs standalone")
	}

	selector := metav1.ListOptions{FieldSelector: "spec.nodeName=node-a,spec.driver=" + gpuDriver}
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

	c := claim("default", "api-claim", "", "node-a", [2]string{gpuDriver, "gpu-1"})
	c.UID = ""
	created, err := client.ResourceV1().ResourceClaims("default").Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = c.Status
	created, err = client.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k := connectKubelet(t, e.cfg, gpuDriver)
	ids := mustPrepared(t, k.prepare(t, created), created)
	if len(ids) != 1 || ids[0] != gpuDriver+"/claim="+string(created.UID)+"-gpu-1" {
		t.Fatalf("CDI IDs %q", ids)
	}
	readSpec(t, specPath(e.cfg, gpuDriver, string(created.UID)))

	// Force-deleted pod, claim gone: unprepare from the record.
	created.Status.Allocation = nil
	if _, err := client.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.ResourceV1().ResourceClaims("default").Delete(ctx, created.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := k.unprepare(t, created)[string(created.UID)]; r.Error != "" {
		t.Fatalf("unprepare without the claim: %s", r.Error)
	}
	if a.cache.Len() != 0 {
		t.Errorf("record holds %d claims after unprepare", a.cache.Len())
	}
}

func countDevices(slices []resourcev1.ResourceSlice) int {
	n := 0
	for _, s := range slices {
		n += len(s.Spec.Devices)
	}
	return n
}
