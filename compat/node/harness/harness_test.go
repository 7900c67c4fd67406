package harness_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dranode/dranode/compat/node/harness"
	"github.com/dranode/dranode/tools/envtest"
)

// TestNodeRunsPodAndLeavesHostAsFound starts a node, runs a pod on it
// through the real scheduler, kubelet, containerd and runc, reads the
// container's output through the API server (as kubectl logs does) and
// checks that Stop leaves the machine as it found it.
func TestNodeRunsPodAndLeavesHostAsFound(t *testing.T) {
	pause, workload := testImages(t)
	before := harness.SnapshotHost()
	env := &envtest.Environment{Scheduler: true, APIServerFlags: harness.APIServerFlags()}
	cfg := envtest.StartT(t, env)
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	n, err := harness.Start(ctx, harness.Options{
		Kubeconfig:   env.KubeconfigPath(),
		Images:       []string{pause, workload},
		SandboxImage: "localhost/dranode/pause:v0.1.0",
		Log:          testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			n.Stop()
		}
	}()
	if _, err := client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: corev1.PodSpec{
			HostNetwork:                  true,
			AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{
				Name: "w", Image: "localhost/dranode/workload:v0.1.0", ImagePullPolicy: corev1.PullNever,
				Env: []corev1.EnvVar{{Name: "HELLO", Value: "node"}},
			}},
		},
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var logs string
	for {
		p, err := client.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			raw, err := client.CoreV1().Pods("default").GetLogs("hello", &corev1.PodLogOptions{}).DoRaw(ctx)
			if err == nil && len(raw) > 0 {
				logs = string(raw)
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("pod not running with logs: %v %+v\nkubelet:\n%s", err, p.Status, n.LogTail("kubelet", 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(logs, "HELLO=node") {
		t.Errorf("container output lacks its environment:\n%s", logs)
	}
	if err := client.CoreV1().Pods("default").Delete(ctx, "hello", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := client.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{}); err != nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("pod not deleted")
		}
		time.Sleep(200 * time.Millisecond)
	}
	stopped = true
	if err := n.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if _, err := os.Stat(n.Dir()); err == nil {
		t.Errorf("node directory %s left behind", n.Dir())
	}
	for _, d := range before.Diff(harness.SnapshotHost()) {
		t.Errorf("host changed: %s", d)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testImages(t *testing.T) (pause, workload string) {
	return "/tmp/exp/img/pause.tar", "/tmp/exp/img/work.tar"
}
