package envtest

import (
	"context"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// The real kube-controller-manager with DefaultControllers does what a
// node's pods need from a control plane, each controller under its own
// service account. No kubelet and no scheduler: the tests look at the
// objects the controllers write.
func TestControllerManager(t *testing.T) {
	env := &Environment{ControllerManager: true, Audit: true}
	cfg := StartT(t, env)
	if pid := env.PIDs()[ControllerManagerBinary]; pid == 0 || !alive(pid) {
		t.Fatalf("kube-controller-manager not running: PIDs %v", env.PIDs())
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()

	t.Run("namespace gets default service account and root CA", func(t *testing.T) {
		ns := createNamespace(t, client, "sa")
		waitFor(t, func() bool {
			_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return !notFound(t, err)
		})
		var ca *corev1.ConfigMap
		waitFor(t, func() bool {
			var err error
			ca, err = client.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			return !notFound(t, err)
		})
		if got := ca.Data["ca.crt"]; got != string(cfg.CAData) {
			t.Errorf("kube-root-ca.crt holds %q, want the environment's CA %q", got, cfg.CAData)
		}
		wantWriter(t, env, "serviceaccounts", ns, "system:serviceaccount:kube-system:service-account-controller")
	})

	t.Run("daemonset pod per node, recreated, collected with its owner", func(t *testing.T) {
		ns := createNamespace(t, client, "ds")
		node := createSchedulableNode(t, client, "node-ds")
		labels := map[string]string{"app": "agent"}
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/none"}}},
				},
			},
		}
		ds, err := client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		first := waitForPods(t, client, ns, 1, "")[0]
		checkDaemonPod(t, first, ds, node)
		wantWriter(t, env, "pods", ns, "system:serviceaccount:kube-system:daemon-set-controller")

		// Not bound to a node (no scheduler), the pod goes at once.
		if err := client.CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		second := waitForPods(t, client, ns, 1, first.UID)[0]
		checkDaemonPod(t, second, ds, node)

		background := metav1.DeletePropagationBackground
		if err := client.AppsV1().DaemonSets(ns).Delete(ctx, ds.Name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
			t.Fatal(err)
		}
		waitForPods(t, client, ns, 0, "")
	})

	t.Run("claim from template for a pod, deleted with it", func(t *testing.T) {
		ns := createNamespace(t, client, "claim")
		waitFor(t, func() bool { // admission wants the pod's service account
			_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return !notFound(t, err)
		})
		tmpl := &resourcev1.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu-template", Namespace: ns},
			Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
				Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}}},
			}}},
		}
		if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "with-gpu", Namespace: ns},
			Spec: corev1.PodSpec{
				ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr("gpu-template")}},
				Containers: []corev1.Container{{
					Name: "c", Image: "example.com/none",
					Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
				}},
			},
		}
		pod, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var claimName string
		waitFor(t, func() bool {
			got, err := client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range got.Status.ResourceClaimStatuses {
				if s.Name == "gpu" && s.ResourceClaimName != nil {
					claimName = *s.ResourceClaimName
					return true
				}
			}
			return false
		})
		claim, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("claim %s named in the pod's status: %v", claimName, err)
		}
		if owner := metav1.GetControllerOf(claim); owner == nil || owner.UID != pod.UID {
			t.Errorf("claim %s controlled by %+v, want the pod %s", claimName, owner, pod.UID)
		}
		if got := claim.Spec.Devices.Requests; len(got) != 1 || got[0].Exactly == nil || got[0].Exactly.DeviceClassName != "gpu.example.com" {
			t.Errorf("claim requests %+v, want the template's", got)
		}
		wantWriter(t, env, "resourceclaims", ns, "system:serviceaccount:kube-system:resource-claim-controller")

		if err := client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			_, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
			return notFound(t, err)
		})
	})

	pids := env.PIDs()
	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, env, pids)
}

// Opting in to the node lifecycle controller: it lifts the not-ready taint
// admission puts on a new Node once the Node reports Ready, which the
// tests above do by hand.
func TestNodeLifecycleControllerOptIn(t *testing.T) {
	env := &Environment{ControllerManager: true, Controllers: append(DefaultControllers(), NodeLifecycleController)}
	client := kubernetes.NewForConfigOrDie(StartT(t, env))
	ctx := context.Background()
	node, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-lc"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasTaint(node, corev1.TaintNodeNotReady) {
		t.Fatalf("new node's taints %+v lack %s: nothing to lift", node.Spec.Taints, corev1.TaintNodeNotReady)
	}
	setReady(t, client, node)
	waitFor(t, func() bool {
		got, err := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return !hasTaint(got, corev1.TaintNodeNotReady)
	})
}

func hasTaint(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}

// notFound reports whether err is NotFound; any other error fails the test.
func notFound(t *testing.T, err error) bool {
	t.Helper()
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err != nil
}

func createNamespace(t *testing.T, client kubernetes.Interface, prefix string) string {
	t.Helper()
	ns, err := client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// setReady reports the node Ready, as its kubelet would.
func setReady(t *testing.T, client kubernetes.Interface, node *corev1.Node) *corev1.Node {
	t.Helper()
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}
	node, err := client.CoreV1().Nodes().UpdateStatus(context.Background(), node, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// createSchedulableNode creates a Ready node without the not-ready taint
// admission gives it (the node lifecycle controller is not running).
func createSchedulableNode(t *testing.T, client kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	ctx := context.Background()
	node, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node = setReady(t, client, node)
	node.Spec.Taints = nil
	if node, err = client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return node
}

// waitForPods waits until ns holds exactly n pods, none with UID old, and
// returns them.
func waitForPods(t *testing.T, client kubernetes.Interface, ns string, n int, old types.UID) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, func() bool {
		list, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods = list.Items
		return len(pods) == n && !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.UID == old })
	})
	return pods
}

// checkDaemonPod checks that pod is ds's, pinned to node the way the
// DaemonSet controller pins pods: a required node affinity on the node's
// name, which the scheduler then binds.
func checkDaemonPod(t *testing.T, pod corev1.Pod, ds *appsv1.DaemonSet, node *corev1.Node) {
	t.Helper()
	if owner := metav1.GetControllerOf(&pod); owner == nil || owner.UID != ds.UID {
		t.Errorf("pod %s controlled by %+v, want the DaemonSet %s", pod.Name, owner, ds.UID)
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Fatalf("pod %s has no required node affinity: %+v", pod.Name, a)
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	want := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node.Name}}
	if len(terms) != 1 || len(terms[0].MatchFields) != 1 || !equalRequirement(terms[0].MatchFields[0], want) {
		t.Errorf("pod %s node affinity %+v, want matchFields %+v", pod.Name, terms, want)
	}
}

func equalRequirement(a, b corev1.NodeSelectorRequirement) bool {
	return a.Key == b.Key && a.Operator == b.Operator && slices.Equal(a.Values, b.Values)
}

// wantWriter checks that user created a resource in ns, by the audit log.
func wantWriter(t *testing.T, env *Environment, resource, ns, user string) {
	t.Helper()
	events, err := env.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, ev := range events {
		if ev.Verb == "create" && ev.ObjectRef != nil && ev.ObjectRef.Resource == resource && ev.ObjectRef.Namespace == ns {
			if ev.User.Username == user {
				return
			}
			users = append(users, ev.User.Username)
		}
	}
	t.Errorf("no create of %s in %s by %s in the audit log; creators: %v", resource, ns, user, users)
}
