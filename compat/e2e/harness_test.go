package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/compat/e2e/harness"
	"github.com/dranode/dranode/compat/e2e/scenarios"
)

// The harness without the agent: slices written directly make the real
// scheduler bind a pod with a template claim to the harness's node and
// allocate and reserve the claim; the kubelet's DRA manager, started
// afterwards, deletes the node's slices; deleting the pod deallocates and
// removes the claim.
func TestHarnessSchedulesAndKubeletWipes(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const driver = "harness.example.com"
	// Names of their own for each run: DeleteNode leaves the node's lease.
	nodeName := scenarios.NodeName(t)
	ns := nodeName
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := cluster.StartNode(ctx, nodeName); err != nil {
		t.Fatal(err)
	}
	defer cluster.DeleteNode(context.Background(), nodeName)
	if err := cluster.EnsureDeviceClass(ctx, driver, driver); err != nil {
		t.Fatal(err)
	}
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName + "-" + driver},
		Spec: resourcev1.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To(nodeName),
			Pool: resourcev1.ResourcePool{Name: nodeName, ResourceSliceCount: 1},
		},
	}
	for i := range 2 {
		slice.Spec.Devices = append(slice.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("dev-%d", i)})
	}
	if _, err := cluster.Client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.CreateTemplate(ctx, ns, "one", harness.ClaimSpecForClasses(driver)); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.CreatePod(ctx, ns, "pod", nodeName, "one"); err != nil {
		t.Fatal(err)
	}
	pods, err := cluster.WaitScheduled(ctx, ns, []string{"pod"}, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if pods[0].Spec.NodeName != nodeName {
		t.Fatalf("pod bound to %q, want %q", pods[0].Spec.NodeName, nodeName)
	}

	events := watchSlices(ctx, t, nodeName)
	dir := t.TempDir()
	k, err := harness.StartKubelet(ctx, harness.KubeletOptions{
		Client: cluster.Client, NodeName: nodeName,
		RegistryDir: filepath.Join(dir, "registry"), StateDir: filepath.Join(dir, "state"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	select {
	case ev := <-events:
		if ev.Type != watch.Deleted {
			t.Fatalf("first slice event after the kubelet started: %s, want DELETED", ev.Type)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the kubelet's DRA manager did not delete the node's slices in 60s")
	}

	if err := cluster.DeletePod(ctx, pods[0]); err != nil {
		t.Fatal(err)
	}
	err = harness.Poll(ctx, 50*time.Millisecond, 30*time.Second, "claim removal", func(ctx context.Context) (bool, error) {
		list, err := cluster.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		if len(list.Items) > 0 {
			return false, fmt.Errorf("%d claims left", len(list.Items))
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
