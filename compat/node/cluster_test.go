package node_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/dranode/dranode/compat/node/harness"
	"github.com/dranode/dranode/scripts/image/workload"
	"github.com/dranode/dranode/tools/envtest"
	"github.com/dranode/dranode/tools/envtest/hostlock"
)

const (
	chartDir   = "../../examples/deploy/chart/dranode"
	samplesDir = "../../examples/deploy/samples"
	agentNS    = "dranode"
)

// cluster is a control plane (with the scheduler and the controllers the
// chart relies on), one real node, and the chart deployed onto it.
type cluster struct {
	t        testing.TB
	ctx      context.Context
	env      *envtest.Environment
	client   kubernetes.Interface
	dyn      dynamic.Interface
	mapper   meta.RESTMapper
	node     *harness.Node
	httpPort int
	// valueFiles are the chart's own values files to deploy with
	// (values-loop.yaml), before the test's values.
	valueFiles []string
}

// startCluster starts everything and deploys the chart with values (on top
// of the chart's own values.yaml and what a node needs: see chartValues).
func startCluster(t testing.TB, values map[string]any) *cluster {
	t.Helper()
	return startClusterOpts(t, clusterOptions{values: func(*cluster) map[string]any { return values }})
}

// clusterOptions say how startClusterOpts deploys the chart.
type clusterOptions struct {
	// valueFiles are the chart's own values files (names in its
	// directory), before values.
	valueFiles []string
	// values returns the values for the started node (nil: none).
	values func(*cluster) map[string]any
	// noWait returns before the agent is ready.
	noWait bool
	// gates are feature gates the components' minors have off by default.
	gates gatesOn
}

// startClusterOpts starts a control plane and a node and deploys the chart.
func startClusterOpts(t testing.TB, o clusterOptions) *cluster {
	t.Helper()
	// The node's host lock (harness.Start takes it again) before the
	// control plane: a test that waits for another package's node waits
	// without an idle control plane of its own.
	hostlock.HoldT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	for _, s := range o.gates.said {
		t.Logf("feature gate turned on: %s", s)
	}
	env := &envtest.Environment{Scheduler: true, ControllerManager: true, Audit: true,
		APIServerFlags: append(harness.APIServerFlags(), o.gates.apiServer...), ServingIPs: harness.APIServerIPs("")}
	cfg := envtest.StartT(t, env)
	// Tests create tens of pods at once: client-go's default 5 requests per
	// second would make the test's own client the bottleneck it measures.
	cfg.QPS, cfg.Burst = 500, 1000
	c := &cluster{t: t, ctx: ctx, env: env, client: kubernetes.NewForConfigOrDie(cfg), dyn: dynamic.NewForConfigOrDie(cfg), valueFiles: o.valueFiles}
	c.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(cfg)))
	n, err := harness.Start(ctx, harness.Options{
		Kubeconfig:          env.KubeconfigPath(),
		Images:              []string{testImages.pause, testImages.workload, testImages.agent},
		SandboxImage:        testImages.pauseRef,
		Log:                 testLog{t},
		KubeletFeatureGates: o.gates.kubelet,
	})
	if err != nil {
		t.Fatal(err)
	}
	c.node = n
	// Two cleanups, run in reverse: the diagnostics first, then the node's
	// Stop, which must run whatever the diagnostics do (a Fatal in a
	// cleanup ends that cleanup; a node left running holds the host's
	// paths and fails the next test's Start).
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Errorf("stopping the node: %v", err)
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubelet log tail:\n%s", n.LogTail("kubelet", 40))
			c.dumpAgentLog()
		}
	})
	c.httpPort = freePort(t)
	var values map[string]any
	if o.values != nil {
		values = o.values(c)
	}
	c.deployChart(c.chartValues(values))
	if !o.noWait {
		c.waitAgentReady()
	}
	return c
}

// chartValues are the chart's values for this node: the local image, the
// node's directories instead of /var/lib/kubelet and /var/run/cdi, the API
// server's address (there is no kube-proxy), a free port, and each driver's
// sha256 from the image — the chart's drivers otherwise as shipped.
func (c *cluster) chartValues(extra map[string]any) map[string]any {
	checkRunbookInstall(c.t)
	// Only each plugin's sha256: Helm merges the drivers map with the
	// chart's own entries, config included.
	drivers := map[string]any{}
	for name, sum := range testImages.pluginSHA256 {
		drivers[name] = map[string]any{"sha256": sum}
	}
	// The agent's pod reaches the apiserver at the node's address, on the
	// node's bridge (there is no kube-proxy for the in-cluster Service).
	_, port := c.apiServerHostPort()
	host := c.node.InternalIP()
	v := map[string]any{
		"image":          map[string]any{"repository": testImages.agentRepo, "tag": testImages.tag, "pullPolicy": "Never"},
		"kubeletRootDir": c.node.KubeletRootDir(),
		"cdiDir":         c.node.CDIDir(),
		"stateDir":       filepath.Join(c.node.Dir(), "dranode"),
		"kubernetesAPI":  map[string]any{"host": host, "port": port},
		"httpPort":       c.httpPort,
		"drivers":        drivers,
	}
	for k, x := range extra {
		v[k] = x
	}
	return v
}

func (c *cluster) apiServerHostPort() (string, int) {
	u := c.env.Config().Host
	u = strings.TrimPrefix(u, "https://")
	host, port, _ := strings.Cut(u, ":")
	p, err := strconv.Atoi(port)
	if err != nil {
		c.t.Fatalf("API server address %q: %v", c.env.Config().Host, err)
	}
	return host, p
}

// deployChart renders the chart with helm template and applies every object
// (server-side apply), as a GitOps tool would.
func (c *cluster) deployChart(values map[string]any) {
	c.t.Helper()
	vf := filepath.Join(c.t.TempDir(), "values.yaml")
	raw, err := yaml.Marshal(values)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(vf, raw, 0o644); err != nil {
		c.t.Fatal(err)
	}
	// The namespace as the runbook makes it: its Pod Security label
	// enforced by the real apiserver on the agent's pods.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNS, Labels: runbookNamespaceLabels(c.t)}}
	if _, err := c.client.CoreV1().Namespaces().Create(c.ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		c.t.Fatal(err)
	}
	args := []string{"template", "dranode", chartDir, "--namespace", agentNS, "--kube-version", strings.TrimPrefix(envtest.KubernetesVersion, "v")}
	for _, f := range c.valueFiles {
		args = append(args, "--values", filepath.Join(chartDir, f))
	}
	out := helm(c.t, append(args, "--values", vf)...)
	for _, doc := range strings.Split(string(out), "\n---") {
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
			c.t.Fatalf("rendered chart: %v\n%s", err, doc)
		}
		if len(obj.Object) == 0 {
			continue
		}
		c.apply(&obj)
	}
}

func (c *cluster) apply(obj *unstructured.Unstructured) {
	c.t.Helper()
	gvk := obj.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		c.t.Fatalf("%s %s: %v", gvk, obj.GetName(), err)
	}
	var r dynamic.ResourceInterface = c.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = agentNS
		}
		r = c.dyn.Resource(m.Resource).Namespace(ns)
	}
	raw, err := obj.MarshalJSON()
	if err != nil {
		c.t.Fatal(err)
	}
	force := true
	if _, err := r.Patch(c.ctx, obj.GetName(), types.ApplyPatchType, raw, metav1.PatchOptions{FieldManager: "dranode-node-test", Force: &force}); err != nil {
		c.t.Fatalf("applying %s %s: %v", gvk.Kind, obj.GetName(), err)
	}
}

func helm(t testing.TB, args ...string) []byte {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helmBinary, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	rendered, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return rendered
}

// agentPod is the DaemonSet's pod on the node, nil if there is none.
func (c *cluster) agentPod() *corev1.Pod {
	pods, err := c.client.CoreV1().Pods(agentNS).List(c.ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && p.Spec.NodeName == c.node.Name() {
			return p
		}
	}
	return nil
}

// waitAgentReady waits for the DaemonSet's pod to be Ready and returns it.
func (c *cluster) waitAgentReady() *corev1.Pod {
	c.t.Helper()
	var last string
	p := c.eventually("the agent's pod Ready", func() (*corev1.Pod, bool) {
		p := c.agentPod()
		if p == nil {
			last = "no pod"
			return nil, false
		}
		last = fmt.Sprintf("%s phase %s %v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		return p, podReady(p)
	}, func() string { return last })
	return p
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// eventually polls check until it is done or the cluster's context ends.
func eventually[T any](c *cluster, what string, check func() (T, bool), last func() string) T {
	c.t.Helper()
	for {
		v, ok := check()
		if ok {
			return v
		}
		select {
		case <-c.ctx.Done():
			c.t.Fatalf("%s: not within the test's time (last: %s)", what, last())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *cluster) eventually(what string, check func() (*corev1.Pod, bool), last func() string) *corev1.Pod {
	c.t.Helper()
	return eventually(c, what, check, last)
}

// workloadPod is a pod from examples/deploy/samples (or one without a claim
// when sample is empty) with the workload image in place of the sample's.
func (c *cluster) workloadPod(name, sample string) *corev1.Pod {
	c.t.Helper()
	p, err := samplePod(name, sample)
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// workloadPodSpec is the claim sample's pod under another name.
func workloadPodSpec(name string) *corev1.Pod {
	p, err := samplePod(name, podSample)
	if err != nil {
		panic(err) // the sample decoded in every other test
	}
	return p
}

func samplePod(name, sample string) (*corev1.Pod, error) {
	p := &corev1.Pod{}
	if sample != "" {
		raw, err := os.ReadFile(filepath.Join(samplesDir, sample))
		if err != nil {
			return nil, err
		}
		if err := yaml.UnmarshalStrict(raw, p); err != nil {
			return nil, fmt.Errorf("%s: %w", sample, err)
		}
	} else {
		p.Namespace = "default"
		p.Spec.Containers = []corev1.Container{{Name: "ctr"}}
	}
	p.Name = name
	// The sample's image is not on this node (no registry is reachable):
	// the workload image prints what the container was given instead.
	for i := range p.Spec.Containers {
		p.Spec.Containers[i].Image = testImages.workloadRef
		p.Spec.Containers[i].ImagePullPolicy = corev1.PullNever
		p.Spec.Containers[i].Command = nil
		p.Spec.Containers[i].Args = nil
	}
	p.Spec.HostNetwork = true
	p.Spec.AutomountServiceAccountToken = new(bool)
	p.Spec.TerminationGracePeriodSeconds = new(int64)
	return p, nil
}

// applySample creates the objects of a sample file other than pods.
func (c *cluster) applySample(sample string) {
	c.t.Helper()
	raw, err := os.ReadFile(filepath.Join(samplesDir, sample))
	if err != nil {
		c.t.Fatal(err)
	}
	var obj unstructured.Unstructured
	if err := yaml.Unmarshal(raw, &obj.Object); err != nil {
		c.t.Fatal(err)
	}
	c.apply(&obj)
}

func (c *cluster) createPod(p *corev1.Pod) {
	c.t.Helper()
	if _, err := c.client.CoreV1().Pods(p.Namespace).Create(c.ctx, p, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating pod %s: %v", p.Name, err)
	}
}

func (c *cluster) waitRunning(ns, name string) *corev1.Pod {
	c.t.Helper()
	var last string
	p, err := watchPod(c.ctx, c.client, ns, name, func(p *corev1.Pod) bool {
		if p == nil {
			last = "no such pod"
			return false
		}
		last = fmt.Sprintf("phase %s, conditions %v, containers %v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
		return p.Status.Phase == corev1.PodRunning
	})
	if err != nil {
		c.t.Fatalf("pod %s Running: %v (last: %s)", name, err, last)
	}
	return p
}

// watchPod returns the pod once done holds for it (done is given nil while
// the pod does not exist), or ctx's error. It waits for the pod's changes
// with a watch, not by asking again and again: tests wait for tens of
// pods at once, and each look costs the API server and this process (under
// -race) far more than a watch event.
func watchPod(ctx context.Context, client kubernetes.Interface, ns, name string, done func(*corev1.Pod) bool) (*corev1.Pod, error) {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	pods := client.CoreV1().Pods(ns)
	for {
		list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			if err := retryPause(ctx); err != nil {
				return nil, err
			}
			continue
		}
		var p *corev1.Pod
		if len(list.Items) > 0 {
			p = &list.Items[0]
		}
		if done(p) {
			return p, nil
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
		if err != nil {
			if err := retryPause(ctx); err != nil {
				return nil, err
			}
			continue
		}
		for ev := range w.ResultChan() {
			var got *corev1.Pod
			switch ev.Type {
			case watch.Added, watch.Modified:
				got = ev.Object.(*corev1.Pod)
			case watch.Deleted:
			default: // bookmarks; an error ends the watch
				continue
			}
			if done(got) {
				w.Stop()
				return got, nil
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The server ended the watch (its timeout, an expired version):
		// list again.
	}
}

// report is what the workload container printed, read through the API
// server as kubectl logs reads it.
func (c *cluster) report(ns, name string) workload.Report {
	c.t.Helper()
	var last error
	return eventually(c, "the report of pod "+name, func() (workload.Report, bool) {
		raw, err := c.client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(c.ctx)
		if err != nil {
			last = err
			return workload.Report{}, false
		}
		r, err := workload.Parse(raw)
		last = err
		return r, err == nil
	}, func() string { return fmt.Sprint(last) })
}

func (c *cluster) deletePod(ns, name string) {
	c.t.Helper()
	if err := c.client.CoreV1().Pods(ns).Delete(c.ctx, name, metav1.DeleteOptions{}); err != nil {
		c.t.Fatalf("deleting pod %s: %v", name, err)
	}
}

// retryPause waits a moment before a failed request is made again; it
// returns ctx's error once ctx has ended.
func retryPause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(200 * time.Millisecond):
		return nil
	}
}

func (c *cluster) waitPodGone(ns, name string) {
	c.t.Helper()
	if _, err := watchPod(c.ctx, c.client, ns, name, func(p *corev1.Pod) bool { return p == nil }); err != nil {
		c.t.Fatalf("pod %s gone: %v (still there)", name, err)
	}
}

// claimOf is the ResourceClaim the resourceclaim controller made for the
// pod's first claim.
func (c *cluster) claimOf(p *corev1.Pod) *resourcev1.ResourceClaim {
	c.t.Helper()
	var last string
	return eventually(c, "claim of pod "+p.Name, func() (*resourcev1.ResourceClaim, bool) {
		p, err := c.client.CoreV1().Pods(p.Namespace).Get(c.ctx, p.Name, metav1.GetOptions{})
		if err != nil || len(p.Status.ResourceClaimStatuses) == 0 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			last = fmt.Sprint(err)
			return nil, false
		}
		claim, err := c.client.ResourceV1().ResourceClaims(p.Namespace).Get(c.ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return nil, false
		}
		return claim, true
	}, func() string { return last })
}

// metrics reads the agent's /metrics at its pod's address (on the node's
// bridge) as name{labels} -> value.
func (c *cluster) metrics() (map[string]float64, error) {
	p := c.agentPod()
	if p == nil || p.Status.PodIP == "" {
		return nil, errors.New("no agent pod with an address")
	}
	return c.metricsOf(p)
}

func (c *cluster) metricsOf(p *corev1.Pod) (map[string]float64, error) {
	resp, err := http.Get(fmt.Sprintf("http://%s:%d/metrics", p.Status.PodIP, c.httpPort))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	m := map[string]float64{}
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("/metrics line %q: %w", line, err)
		}
		m[line[:i]] = v
	}
	return m, s.Err()
}

// metric is one sample of the agent's metrics; a counter of a label set
// that never counted is absent, which is 0.
func (c *cluster) metric(name string) float64 {
	c.t.Helper()
	m, err := c.metrics()
	if err != nil {
		c.t.Fatal(err)
	}
	return m[name]
}

// agentRegistrations counts the kubelet's registrations of the agent's
// plugin in the agent's log (the kubelet's NotifyRegistrationStatus).
// The log comes through the kubelet, so it fails while the kubelet is
// down or starting.
func (c *cluster) agentRegistrations() (int, error) {
	log, err := c.agentLog(c.agentPod(), false)
	return strings.Count(log, "Registered with the kubelet"), err
}

// kubeletPodSyncs is how many pod syncs the running kubelet has done, from
// its own metrics (through the API server, as kubectl get --raw does); a
// kubelet starts counting from zero.
func (c *cluster) kubeletPodSyncs() float64 {
	c.t.Helper()
	raw, err := c.client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", c.node.Name(), "proxy/metrics").DoRaw(c.ctx)
	if err != nil {
		return 0 // the kubelet may not serve yet
	}
	var n float64
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "kubelet_pod_worker_duration_seconds_count") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			n += v
		}
	}
	return n
}

// agentLog is the agent container's log as kubectl logs shows it.
func (c *cluster) agentLog(p *corev1.Pod, previous bool) (string, error) {
	raw, err := c.client.CoreV1().Pods(agentNS).GetLogs(p.Name, &corev1.PodLogOptions{Previous: previous}).DoRaw(c.ctx)
	return string(raw), err
}

// dumpAgentLog logs the tail of the agent's log. It runs in a cleanup,
// after the test's own context may have ended: it has a context of its own
// and reports what it cannot read instead of failing.
func (c *cluster) dumpAgentLog() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := c.client.CoreV1().Pods(agentNS).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + c.node.Name()})
	if err != nil || len(pods.Items) == 0 {
		c.t.Logf("no agent pod to show the log of (%v)", err)
		return
	}
	p := pods.Items[0]
	raw, err := c.client.CoreV1().Pods(agentNS).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	c.t.Logf("agent pod %s log (%v):\n%s", p.Name, err, tailLines(string(raw), 60))
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cdiSpecs lists the CDI spec files in the node's CDI directory.
func (c *cluster) cdiSpecs() []string {
	c.t.Helper()
	ents, err := os.ReadDir(c.node.CDIDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		c.t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() && (strings.HasSuffix(e.Name(), ".json") || strings.HasSuffix(e.Name(), ".yaml")) {
			names = append(names, e.Name())
		}
	}
	return names
}

type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
