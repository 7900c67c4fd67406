package envtest

// These tests start the real control plane. They fail (never skip) when the
// binaries are missing: "make test" builds them first.

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

func checkGone(t *testing.T, env *Environment, pids map[string]int) {
	t.Helper()
	for name, pid := range pids {
		if alive(pid) {
			t.Errorf("%s (pid %d) still running", name, pid)
		}
	}
	if _, err := os.Stat(env.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary directory %s left behind (stat: %v)", env.Dir(), err)
	}
}

func TestStartServesResourceAPIAndStops(t *testing.T) {
	var output bytes.Buffer // not safe for concurrent use: Environment serialises
	env := &Environment{Stderr: &output}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	pids := env.PIDs()
	stopped := false
	defer func() {
		if !stopped {
			env.Stop()
		}
	}()
	if len(pids) != 2 || pids["etcd"] == 0 || pids["kube-apiserver"] == 0 {
		t.Fatalf("PIDs = %v, want etcd and kube-apiserver", pids)
	}
	for name, pid := range pids {
		if !alive(pid) {
			t.Errorf("%s (pid %d) not running after Start", name, pid)
		}
	}

	ctx := context.Background()
	client := kubernetes.NewForConfigOrDie(cfg)
	class := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.example.com"}}
	if _, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a DeviceClass: %v", err)
	}
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a-gpu"},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   "gpu.example.com",
			NodeName: ptr("node-a"),
			Pool:     resourcev1.ResourcePool{Name: "node-a", ResourceSliceCount: 1},
			Devices:  []resourcev1.Device{{Name: "gpu-0"}},
		},
	}
	if _, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a ResourceSlice: %v", err)
	}
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"})
	if err != nil {
		t.Fatalf("listing ResourceSlices: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "node-a-gpu" || list.Items[0].Spec.Devices[0].Name != "gpu-0" {
		t.Errorf("listed %+v, want the one slice created", list.Items)
	}
	classes, err := client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil || len(classes.Items) != 1 {
		t.Errorf("listing DeviceClasses: %d items, %v", len(classes.Items), err)
	}

	// RBAC is on: a token the apiserver does not know gets nothing.
	stranger := rest.CopyConfig(cfg)
	stranger.BearerToken = "not-a-token"
	_, err = kubernetes.NewForConfigOrDie(stranger).ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("listing with an unknown token: %v, want Unauthorized", err)
	}
	anonymous := rest.AnonymousClientConfig(cfg)
	_, err = kubernetes.NewForConfigOrDie(anonymous).ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("listing anonymously: %v, want Forbidden", err)
	}

	if _, err := os.Stat(env.KubeconfigPath()); err != nil {
		t.Errorf("admin kubeconfig: %v", err)
	}

	stopped = true
	if err := env.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	checkGone(t, env, pids)
	if err := env.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if !strings.Contains(output.String(), "[kube-apiserver] ") {
		t.Errorf("Stderr did not receive the apiserver's output:\n%.2000s", output.String())
	}
	for _, line := range strings.Split(strings.TrimSuffix(output.String(), "\n"), "\n") {
		if !strings.HasPrefix(line, "[etcd] ") && !strings.HasPrefix(line, "[kube-apiserver] ") {
			t.Errorf("output line without a component prefix: %q", line)
			break
		}
	}
	if _, err := env.Start(); !errors.Is(err, ErrAlreadyStarted) {
		t.Errorf("Start after Stop = %v, want ErrAlreadyStarted", err)
	}
}

// A component that does not come up takes the ones before it down with it.
func TestFailedStartRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name          string
		env           *Environment
		wantComponent string
		wantLog       string
	}{
		{
			name:          "bad apiserver flag",
			env:           &Environment{APIServerFlags: []string{"--no-such-flag=1"}},
			wantComponent: "kube-apiserver",
			wantLog:       "no-such-flag",
		},
		{
			name:          "bad scheduler flag",
			env:           &Environment{Scheduler: true, SchedulerFlags: []string{"--no-such-flag=1"}},
			wantComponent: "kube-scheduler",
			wantLog:       "no-such-flag",
		},
		{
			name:          "bad controller-manager flag",
			env:           &Environment{Scheduler: true, ControllerManager: true, ControllerManagerFlags: []string{"--no-such-flag=1"}},
			wantComponent: "kube-controller-manager",
			wantLog:       "no-such-flag",
		},
		{
			name:          "unknown controller",
			env:           &Environment{ControllerManager: true, Controllers: []string{DaemonSetController, "no-such-controller"}},
			wantComponent: "kube-controller-manager",
			wantLog:       "no-such-controller",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.env.Start()
			if err == nil {
				tc.env.Stop()
				t.Fatal("Start succeeded")
			}
			if cfg != nil {
				t.Error("a failed Start returned a config")
			}
			var se *StartError
			if !errors.As(err, &se) {
				t.Fatalf("error %T (%v) is not a *StartError", err, err)
			}
			if se.Component != tc.wantComponent || !strings.Contains(se.LogTail, tc.wantLog) {
				t.Errorf("StartError for %s with log tail %q; want %s mentioning %q", se.Component, se.LogTail, tc.wantComponent, tc.wantLog)
			}
			pids := tc.env.PIDs()
			if pids["etcd"] == 0 || pids[tc.wantComponent] == 0 {
				t.Errorf("PIDs = %v, want etcd and %s", pids, tc.wantComponent)
			}
			checkGone(t, tc.env, pids)
			if err := tc.env.Stop(); err != nil {
				t.Errorf("Stop after rollback: %v", err)
			}
		})
	}
}

// The scheduler is connected and schedules with DRA: with no nodes a pod is
// marked unschedulable (nothing else would set that condition); with a node
// that publishes a device, a pod's claim is allocated that device and the
// pod is bound to the node.
func TestSchedulerAllocatesClaims(t *testing.T) {
	env := &Environment{Scheduler: true}
	cfg := StartT(t, env)
	if pid := env.PIDs()["kube-scheduler"]; pid == 0 || !alive(pid) {
		t.Fatalf("kube-scheduler not running: PIDs %v", env.PIDs())
	}
	ctx := context.Background()
	client := kubernetes.NewForConfigOrDie(cfg)
	// No controller-manager here: the namespace's default service account
	// is the test's to create.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}}
	if _, err := client.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "waits", Namespace: "default"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/none"}}},
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Polling without a wall-clock bound: the test's own -timeout ends it
	// if the scheduler never acts.
	waitFor(t, func() bool {
		got, err := client.CoreV1().Pods("default").Get(ctx, "waits", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				if c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable {
					t.Fatalf("PodScheduled = %s (%s), want False (Unschedulable)", c.Status, c.Reason)
				}
				return true
			}
		}
		return false
	})

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	node, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("10"),
	}
	node.Status = corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()}},
	}
	if node, err = client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Admission taints a new node not-ready; the node lifecycle controller,
	// absent here, would lift the taint once the node reports Ready.
	node.Spec.Taints = nil
	if _, err := client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	class := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.example.com"}}
	if _, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a-gpu"},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   "gpu.example.com",
			NodeName: ptr("node-a"),
			Pool:     resourcev1.ResourcePool{Name: "node-a", ResourceSliceCount: 1},
			Devices:  []resourcev1.Device{{Name: "gpu-0"}},
		},
	}
	if _, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: "default"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}}},
		}},
	}
	if _, err := client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	withClaim := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "with-gpu", Namespace: "default"},
		Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr("gpu")}},
			Containers: []corev1.Container{{
				Name: "c", Image: "example.com/none",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
			}},
		},
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, withClaim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		got, err := client.CoreV1().Pods("default").Get(ctx, "with-gpu", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Spec.NodeName != ""
	})
	got, err := client.CoreV1().Pods("default").Get(ctx, "with-gpu", metav1.GetOptions{})
	if err != nil || got.Spec.NodeName != "node-a" {
		t.Fatalf("pod bound to %q (%v), want node-a", got.Spec.NodeName, err)
	}
	allocated, err := client.ResourceV1().ResourceClaims("default").Get(ctx, "gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if allocated.Status.Allocation == nil || len(allocated.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim status %+v, want one allocated device", allocated.Status)
	}
	r := allocated.Status.Allocation.Devices.Results[0]
	if r.Driver != "gpu.example.com" || r.Pool != "node-a" || r.Device != "gpu-0" {
		t.Errorf("allocated %s/%s/%s, want gpu.example.com/node-a/gpu-0", r.Driver, r.Pool, r.Device)
	}
	if len(allocated.Status.ReservedFor) != 1 || allocated.Status.ReservedFor[0].Name != "with-gpu" {
		t.Errorf("claim reserved for %+v, want the pod with-gpu", allocated.Status.ReservedFor)
	}
}

// waitFor polls done until it is true; the test's -timeout bounds it.
func waitFor(t *testing.T, done func() bool) {
	t.Helper()
	for !done() {
		time.Sleep(100 * time.Millisecond)
	}
}

// The audit log counts the writes made from outside, by user and resource.
func TestAuditLogCountsWrites(t *testing.T) {
	env := &Environment{Audit: true}
	cfg := StartT(t, env)
	if env.AuditLogPath() == "" {
		t.Fatal("AuditLogPath empty with Audit set")
	}
	ctx := context.Background()
	client := kubernetes.NewForConfigOrDie(cfg)
	for _, name := range []string{"a.example.com", "b.example.com"} {
		class := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.ResourceV1().DeviceClasses().Delete(ctx, "a.example.com", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	events, err := env.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	verbs := map[string]int{}
	for _, ev := range events {
		if ev.User.Username == "admin" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "deviceclasses" && ev.Stage == "ResponseComplete" {
			verbs[ev.Verb]++
		}
	}
	if verbs["create"] != 2 || verbs["delete"] != 1 || verbs["list"] != 0 {
		t.Errorf("audited admin writes on deviceclasses: %v, want 2 create, 1 delete, no list", verbs)
	}
}

func ptr[T any](v T) *T { return &v }

// A port picked as free but taken before the component binds it costs a
// retry on new ports, not a failed start.
func TestPortTakenIsRetried(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	calls := 0
	pickPorts = func(n int) ([]int, error) {
		calls++
		ports, err := freePorts(n)
		// Call 1 is etcd's first attempt, 3 the apiserver's first, 5
		// kube-controller-manager's first.
		if err == nil && (calls == 1 || calls == 3 || calls == 5) {
			ports[0] = port
		}
		return ports, err
	}
	defer func() { pickPorts = freePorts }()

	env := &Environment{ControllerManager: true}
	cfg := StartT(t, env)
	if _, err := kubernetes.NewForConfigOrDie(cfg).Discovery().ServerVersion(); err != nil {
		t.Fatalf("apiserver after retries: %v", err)
	}
	if pid := env.PIDs()[ControllerManagerBinary]; pid == 0 || !alive(pid) {
		t.Errorf("kube-controller-manager not running after its retry: PIDs %v", env.PIDs())
	}
	if calls != 6 {
		t.Errorf("%d port picks, want 6 (a retry each for etcd, the apiserver and kube-controller-manager)", calls)
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(env.Dir(), name+".log.port-collision")); err != nil {
			t.Errorf("no log of %s's failed attempt: %v", name, err)
		}
	}
}
