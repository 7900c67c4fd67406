package harness_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dranode/dranode/compat/node/harness"
	"github.com/dranode/dranode/scripts/image/images"
	"github.com/dranode/dranode/tools/envtest"
	"github.com/dranode/dranode/tools/envtest/hostlock"
)

// TestNodeRunsPodAndLeavesHostAsFound starts a node, runs a pod on it
// through the real scheduler, kubelet, containerd and runc, reads the
// container's output through the API server (as kubectl logs does) and
// checks that Stop leaves the machine as it found it.
func TestNodeRunsPodAndLeavesHostAsFound(t *testing.T) {
	pause, workload := testImages(t)
	// Held from the first look at the host to the last: a node another
	// test package starts meanwhile would show up as a change.
	hostlock.HoldT(t)
	// A node killed with its machine left things behind that Start would
	// remove: gone before the first look, they are no change of this test's.
	if err := harness.SweepStale(testWriter{t}); err != nil {
		t.Fatal(err)
	}
	before := harness.SnapshotHost()
	env := &envtest.Environment{Scheduler: true, APIServerFlags: harness.APIServerFlags()}
	cfg := envtest.StartT(t, env)
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	n, err := harness.Start(ctx, harness.Options{
		Kubeconfig:   env.KubeconfigPath(),
		Images:       []string{pause, workload},
		SandboxImage: pauseRef,
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
				Name: "w", Image: workloadRef, ImagePullPolicy: corev1.PullNever,
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

var (
	imagesDir                 string
	imagesOnce                sync.Once
	pauseImage, workloadImage string
	// pauseRef and workloadRef are the images' names as imported (their
	// tag is the release version in versions.yaml).
	pauseRef, workloadRef string
	imagesErr             error
)

// TestMain removes the images testImages built, which every test shares.
func TestMain(m *testing.M) {
	code := m.Run()
	if imagesDir != "" {
		os.RemoveAll(imagesDir)
	}
	os.Exit(code)
}

// testImages builds the pause and workload images once per test binary
// (scripts/image) into imagesDir and returns them as OCI archives.
func testImages(t *testing.T) (pause, workload string) {
	t.Helper()
	imagesOnce.Do(func() {
		dir, err := os.MkdirTemp("", "dranode-harness-images-")
		if err != nil {
			imagesErr = err
			return
		}
		imagesDir = dir
		root, _ := filepath.Abs("../../..")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		ls, err := images.Build(ctx, images.Options{Root: root, Out: filepath.Join(dir, "layouts"), Images: []string{images.Pause, images.Workload}, Arch: runtime.GOARCH})
		if err != nil {
			imagesErr = err
			return
		}
		pauseImage, workloadImage = filepath.Join(dir, "pause.tar"), filepath.Join(dir, "workload.tar")
		pauseRef, workloadRef = ls[images.Pause].Ref, ls[images.Workload].Ref
		imagesErr = errors.Join(images.ArchiveFile(ls[images.Pause].Dir, pauseImage), images.ArchiveFile(ls[images.Workload].Dir, workloadImage))
	})
	if imagesErr != nil {
		t.Fatalf("building the test images: %v", imagesErr)
	}
	return pauseImage, workloadImage
}

// TestStartSweepsADeadNode kills a test binary that runs a node (SIGKILL: no
// Stop, no cleanup) and checks that the next Start removes what it left and
// works, and that Stop then leaves the machine as it was before the first.
func TestStartSweepsADeadNode(t *testing.T) {
	if os.Getenv("DRANODE_NODE_CHILD") != "" {
		t.Skip("this is the child process")
	}
	pause, _ := testImages(t)
	// Held from the first look at the host to the last, and passed to the
	// child, so that no other test's node shows up in the comparison.
	hostlock.HoldT(t)
	if err := harness.SweepStale(testWriter{t}); err != nil {
		t.Fatal(err)
	}
	before := harness.SnapshotHost()
	env := &envtest.Environment{APIServerFlags: harness.APIServerFlags()}
	envtest.StartT(t, env)

	// The child starts a node, says so, and waits to be killed.
	child := exec.Command(os.Args[0], "-test.run=^TestChildNode$", "-test.v")
	child.Env = append(os.Environ(), "DRANODE_NODE_CHILD="+env.KubeconfigPath(), "DRANODE_NODE_PAUSE="+pause, "DRANODE_NODE_PAUSE_REF="+pauseRef)
	if err := hostlock.Pass(child); err != nil {
		t.Fatal(err)
	}
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = child.Stdout
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	started := false
	for sc.Scan() {
		t.Log("child: " + sc.Text())
		if strings.Contains(sc.Text(), "NODE STARTED") {
			started = true
			break
		}
	}
	if !started {
		child.Wait()
		t.Fatal("the child did not start its node")
	}
	child.Process.Kill()
	child.Wait()
	if d := before.Diff(harness.SnapshotHost()); len(d) == 0 {
		t.Fatal("the killed node left nothing behind; this test proves nothing")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n, err := harness.Start(ctx, harness.Options{Kubeconfig: env.KubeconfigPath(), Images: []string{pause}, SandboxImage: pauseRef, Log: testWriter{t}})
	if err != nil {
		t.Fatalf("Start after a dead node: %v", err)
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, d := range before.Diff(harness.SnapshotHost()) {
		t.Errorf("host changed: %s", d)
	}
}

// TestChildNode is TestStartSweepsADeadNode's child process: it starts a
// node and never stops it.
func TestChildNode(t *testing.T) {
	kubeconfig := os.Getenv("DRANODE_NODE_CHILD")
	if kubeconfig == "" {
		t.Skip("only run as TestStartSweepsADeadNode's child")
	}
	if _, err := harness.Start(context.Background(), harness.Options{Kubeconfig: kubeconfig, Images: []string{os.Getenv("DRANODE_NODE_PAUSE")}, SandboxImage: os.Getenv("DRANODE_NODE_PAUSE_REF")}); err != nil {
		t.Fatal(err)
	}
	fmt.Println("NODE STARTED")
	select {}
}
