package scenarios

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dranode/dranode/compat/e2e/harness"
)

// PrepareTimeout bounds a pod's prepare including the kubelet-style
// retries; it is a deadline for a hang, not a speed requirement.
const PrepareTimeout = 90 * time.Second

// Node is one test node: a driver serving the kubelet's own plugin and DRA
// managers (Kubelet), on a real control plane. Its methods fail the test
// themselves.
type Node interface {
	Context() context.Context
	Cluster() *harness.Cluster
	Namespace() string
	Kubelet() *harness.Kubelet
	// CDIDir is where the driver writes its CDI specs.
	CDIDir() string
	// SchedulePods creates count pods with one claim each and waits until
	// the scheduler bound them to this node.
	SchedulePods(prefix string, count int) []*corev1.Pod
	// PrepareAll prepares pods concurrently, retrying as the kubelet does.
	PrepareAll(pods []*corev1.Pod)
	// VerifyCDI checks that the pod's CDI IDs resolve in the reference CDI
	// library to the devices allocated to it, and returns them.
	VerifyCDI(pod *corev1.Pod) []string
	// UnprepareAll unprepares and deletes pods; their CDI IDs (ids[i] for
	// pods[i]) must no longer resolve.
	UnprepareAll(pods []*corev1.Pod, ids [][]string)
	// MarkUnhealthy makes the driver refuse the pod's devices on its next
	// real prepare; unmark undoes it.
	MarkUnhealthy(pod *corev1.Pod) (unmark func())
	// RestartNode restarts the driver and the kubelet, with a new boot ID
	// when bootID is not empty.
	RestartNode(bootID string)
}

// FiftyPods prepares 50 pods at once: every CDI ID resolves to the
// allocated device and none is handed out twice; after unprepare the CDI
// directory is empty.
func FiftyPods(t *testing.T, n Node) {
	pods := n.SchedulePods("p", 50)
	n.PrepareAll(pods)
	ids := make([][]string, len(pods))
	seen := map[string]string{}
	for i, p := range pods {
		ids[i] = n.VerifyCDI(p)
		for _, id := range ids[i] {
			if other, dup := seen[id]; dup {
				t.Errorf("CDI ID %s handed to both %s and %s", id, other, p.Name)
			}
			seen[id] = p.Name
		}
	}
	n.UnprepareAll(pods, ids)
	if entries, err := os.ReadDir(n.CDIDir()); err != nil || len(entries) != 0 {
		t.Errorf("CDI directory after every unprepare: %d entries (%v), want none", len(entries), err)
	}
}

// Reboot: a restart in the same boot answers the kubelet from the record
// (a device marked unhealthy would make a real prepare fail); after a
// reboot (another boot ID) the next prepare is a real one again, refuses
// the marked device, and succeeds once it is healthy with the same CDI IDs.
func Reboot(t *testing.T, n Node) {
	pods := n.SchedulePods("b", 1)
	pod := pods[0]
	n.PrepareAll(pods)
	first := n.VerifyCDI(pod)
	unmark := n.MarkUnhealthy(pod)

	// A restarted kubelet prepares again (its restored claims are not
	// marked prepared); the driver answers from its record.
	n.RestartNode("")
	if err := n.Kubelet().DRA.PrepareResources(n.Context(), pod); err != nil {
		t.Fatalf("prepare after a restart in the same boot prepared the devices again or failed: %v", err)
	}
	if got := n.VerifyCDI(pod); strings.Join(got, ",") != strings.Join(first, ",") {
		t.Errorf("CDI IDs changed across a restart: %v, then %v", first, got)
	}

	n.RestartNode("boot-2")
	err := n.Kubelet().DRA.PrepareResources(n.Context(), pod)
	if err == nil || !strings.Contains(err.Error(), "unhealthy") {
		t.Fatalf("prepare after a reboot: %v; want the driver's refusal of the device marked unhealthy", err)
	}
	unmark()
	n.PrepareAll(pods)
	ids := n.VerifyCDI(pod)
	if strings.Join(ids, ",") != strings.Join(first, ",") {
		t.Errorf("CDI IDs changed across a reboot: %v, then %v", first, ids)
	}
	n.UnprepareAll(pods, [][]string{ids})
}

// ForceDeletedPod: the pod is force-deleted and its claim is gone from the
// API server; the kubelet's unprepare still succeeds, from the driver's
// record, and the CDI IDs no longer resolve.
func ForceDeletedPod(t *testing.T, n Node) {
	pods := n.SchedulePods("f", 1)
	pod := pods[0]
	n.PrepareAll(pods)
	ids := n.VerifyCDI(pod)
	c := n.Cluster()
	if err := c.DeletePod(n.Context(), pod); err != nil {
		t.Fatal(err)
	}
	err := harness.Poll(n.Context(), 50*time.Millisecond, 30*time.Second, "claim deletion", func(ctx context.Context) (bool, error) {
		list, err := c.Client.ResourceV1().ResourceClaims(n.Namespace()).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(list.Items) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Kubelet().SetActive(pod, false)
	if err := n.Kubelet().DRA.UnprepareResources(n.Context(), pod); err != nil {
		t.Fatalf("unprepare of a force-deleted pod: %v", err)
	}
	if _, err := harness.ResolveCDI(n.CDIDir(), ids); !errors.Is(err, harness.ErrUnresolved) {
		t.Errorf("CDI IDs %v still resolve after unprepare (err %v)", ids, err)
	}
}
