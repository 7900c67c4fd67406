package agent_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2/ktesting"

	"github.com/dranode/dranode/agent"
	"github.com/dranode/dranode/agent/config"
	"github.com/dranode/dranode/sliceclient/claimstatus"
	"github.com/dranode/dranode/tools/envtest"
)

const gpu2Driver = "gpu2.example.com"

// withSecondDriver adds a second instance of the example plugin serving
// gpu2Driver.
func withSecondDriver(cfg *config.Config) {
	second := cfg.Plugins.Drivers[0]
	second.Name = "gpu2"
	second.Config = map[string]any{"driverName": gpu2Driver, "numDevices": 2, "devRoot": second.Config["devRoot"].(string) + "2"}
	cfg.Plugins.Drivers = append(cfg.Plugins.Drivers, second)
}

// clusterWithNode starts a control plane for the test with nodeName's Node
// and returns its admin config and a client.
func clusterWithNode(t testing.TB) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	restCfg := envtest.StartT(t, &envtest.Environment{})
	client := kubernetes.NewForConfigOrDie(restCfg)
	if _, err := client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return restCfg, client
}

// twoDriverClaim is allocated one GPU of each driver on nodeName.
func twoDriverClaim(namespace, name string) *resourcev1.ResourceClaim {
	c := allocated(namespace, name, "gpu-1")
	c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourcev1.DeviceRequest{
		Name: "req2", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu2"},
	})
	c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourcev1.DeviceRequestAllocationResult{
		Request: "req2", Driver: gpu2Driver, Pool: "pool-a", Device: "gpu-0",
	})
	return c
}

// statusEntries waits until the claim's status.devices, as
// "driver/pool/device", is want, and returns the claim.
func statusEntries(t *testing.T, ctx context.Context, client kubernetes.Interface, c *resourcev1.ResourceClaim, want []string) *resourcev1.ResourceClaim {
	t.Helper()
	var got []string
	for {
		claim, err := client.ResourceV1().ResourceClaims(c.Namespace).Get(context.Background(), c.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, d := range claim.Status.Devices {
			got = append(got, d.Driver+"/"+d.Pool+"/"+d.Device)
		}
		slices.Sort(got)
		if slices.Equal(got, want) {
			return claim
		}
		select {
		case <-ctx.Done():
			t.Fatalf("status.devices is %q, never became %q", got, want)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// counter is the value of a counter with the given labels in reg (0 when
// it has not been counted).
func counter(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestDeviceStatus: the agent, with two instances of the example plugin
// (two drivers), writes each driver's device status to one claim after
// the Prepare, under a field manager per driver, leaving a third party's
// entries of another driver alone; the Unprepare writes nothing, and the
// entries go with the claim's allocation.
func TestDeviceStatus(t *testing.T) {
	restCfg, client := clusterWithNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := nodeConfig(t)
	withSecondDriver(&cfg)
	reg := prometheus.NewRegistry()
	start(t, cfg, agent.Options{RESTConfig: restCfg, Registry: reg})

	c := twoDriverClaim("default", "two-drivers")
	c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourcev1.DeviceRequestAllocationResult{
		Request: "req", Driver: "nic.example.com", Pool: "pool-a", Device: "nic-0",
	})
	created := createAllocated(t, client, c)
	// Another driver's entry, written by its own agent before ours.
	created.Status.Devices = []resourcev1.AllocatedDeviceStatus{{Driver: "nic.example.com", Pool: "pool-a", Device: "nic-0"}}
	created, err := client.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	k := connectKubelet(t, cfg, gpuDriver)
	if ids := k.prepare(t, created); len(ids) != 1 {
		t.Fatalf("CDI IDs %q", ids)
	}
	claim := statusEntries(t, ctx, client, created, []string{gpuDriver + "/pool-a/gpu-1", gpu2Driver + "/pool-a/gpu-0", "nic.example.com/pool-a/nic-0"})
	for _, d := range claim.Status.Devices {
		if d.Driver == "nic.example.com" {
			continue
		}
		var data struct{ UUID, Model string }
		if err := json.Unmarshal(d.Data.Raw, &data); err != nil || data.UUID == "" || data.Model == "" {
			t.Errorf("%s/%s data %s (%v), want the GPU's uuid and model", d.Driver, d.Device, d.Data.Raw, err)
		}
		if len(d.Conditions) != 1 || d.Conditions[0].Type != "Ready" || d.Conditions[0].Status != metav1.ConditionTrue {
			t.Errorf("%s/%s conditions %+v, want Ready", d.Driver, d.Device, d.Conditions)
		}
	}
	var managers []string
	for _, m := range claim.ManagedFields {
		if m.Operation == metav1.ManagedFieldsOperationApply {
			managers = append(managers, m.Manager)
		}
	}
	slices.Sort(managers)
	if want := []string{"dranode/" + gpuDriver, "dranode/" + gpu2Driver}; !slices.Equal(managers, want) {
		t.Errorf("apply managers %q, want %q", managers, want)
	}

	if msg := k.unprepare(t, created); msg != "" {
		t.Fatalf("unprepare: %s", msg)
	}
	// The unprepare writes nothing: the resourceclaim controller
	// deallocates a claim no pod uses any more, and the API server drops
	// the deallocated devices' entries with the allocation, as done here.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.ResourceV1().ResourceClaims("default").Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Allocation, cur.Status.ReservedFor = nil, nil
		_, err = client.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	statusEntries(t, ctx, client, created, nil)
	for _, d := range []string{gpuDriver, gpu2Driver} {
		for op, want := range map[string]float64{"apply": 1, "clear": 0} {
			if n := counter(t, reg, "dranode_claim_status_writes_total", map[string]string{"driver": d, "op": op}); n != want {
				t.Errorf("dranode_claim_status_writes_total{driver=%q,op=%q} = %v, want %v", d, op, n, want)
			}
		}
	}
}

// TestDeviceStatusRefused: an agent whose service account may do
// everything else but not write claim status (the RBAC of a chart before
// device status) prepares and unprepares as before; each refused write is
// counted with reason Forbidden and logged.
func TestDeviceStatusRefused(t *testing.T) {
	restCfg, client := clusterWithNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "agent-without-status"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
	}}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "dranode", Name: "agent"}},
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	asAgent := rest.CopyConfig(restCfg)
	asAgent.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:dranode:agent",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:dranode", "system:authenticated"},
		Extra:    map[string][]string{"authentication.kubernetes.io/node-name": {nodeName}},
	}

	cfg := nodeConfig(t)
	reg := prometheus.NewRegistry()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2), ktesting.BufferLogs(true)))
	opts := agent.Options{RESTConfig: asAgent, Registry: reg, Logger: logger}
	a, err := agent.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop() })

	created := createAllocated(t, client, allocated("default", "no-status-rbac", "gpu-2"))
	k := connectKubelet(t, cfg, gpuDriver)
	if ids := k.prepare(t, created); len(ids) != 1 {
		t.Fatalf("CDI IDs %q", ids)
	}
	// The agent counts the refusal, then logs it: wait for both.
	forbidden := map[string]string{"driver": gpuDriver, "reason": "Forbidden"}
	logged := func() (string, bool) {
		logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
		return logs, strings.Contains(logs, "Writing the claim's device status failed") && strings.Contains(logs, "forbidden")
	}
	for {
		counted := counter(t, reg, "dranode_claim_status_write_errors_total", forbidden) >= 1
		logs, ok := logged()
		if counted && ok {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the refused status write: counted %v, logged %v; the log:\n%s", counted, ok, logs)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if msg := k.unprepare(t, created); msg != "" {
		t.Fatalf("unprepare after a refused status write: %s", msg)
	}
	if n := counter(t, reg, "dranode_claim_status_writes_total", map[string]string{"driver": gpuDriver}); n != 0 {
		t.Errorf("%v status writes accepted without the permission", n)
	}
	got, err := client.ResourceV1().ResourceClaims("default").Get(ctx, created.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Devices) != 0 {
		t.Errorf("status.devices %+v written without the permission", got.Status.Devices)
	}
}

// BenchmarkPrepareDeviceStatus is what writing the device status costs a
// Prepare, against a real kube-apiserver and etcd with the agent running
// the example plugin (which reports a status per GPU): the kubelet's
// Prepare as the agent does it, the status written afterwards by its
// workers ("async"), against the same Prepare followed by the same
// server-side apply made synchronously, as a Prepare that wrote the status
// itself would ("inline"). Each iteration unprepares again, untimed.
func BenchmarkPrepareDeviceStatus(b *testing.B) {
	restCfg, client := clusterWithNode(b)
	ctx := context.Background()
	cfg := nodeConfig(b)
	fast := rest.CopyConfig(restCfg)
	fast.QPS, fast.Burst = 1e6, 1e6 // measure the calls, not the limiter
	cfg.Claims.QPS, cfg.Claims.Burst = 1e6, 1e6
	reg := prometheus.NewRegistry()
	start(b, cfg, agent.Options{RESTConfig: fast, Registry: reg})
	k := connectKubelet(b, cfg, gpuDriver)
	created := createAllocated(b, client, allocated("default", "bench-status", "gpu-0"))
	w, err := claimstatus.New(claimstatus.Options{REST: kubernetes.NewForConfigOrDie(fast).ResourceV1().RESTClient(), DriverName: gpuDriver}) // the agent's own manager: the same entries, one owner
	if err != nil {
		b.Fatal(err)
	}
	ref := claimstatus.Claim{Namespace: created.Namespace, Name: created.Name, UID: created.UID}
	entry := []resourcev1.AllocatedDeviceStatus{{Pool: "pool-a", Device: "gpu-0",
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Prepared", LastTransitionTime: metav1.Now()}}}}
	for _, mode := range []string{"async", "inline"} {
		b.Run("status="+mode, func(b *testing.B) {
			var total time.Duration
			n := 0
			for b.Loop() {
				t0 := time.Now()
				k.prepare(b, created)
				if mode == "inline" {
					if err := w.Apply(ctx, ref, entry); err != nil {
						b.Fatal(err)
					}
				}
				total += time.Since(t0)
				n++
				b.StopTimer()
				if msg := k.unprepare(b, created); msg != "" {
					b.Fatal(msg)
				}
				if mode == "inline" {
					if err := w.Clear(ctx, ref); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Microseconds())/float64(n), "µs/prepare")
		})
	}
	if n := counter(b, reg, "dranode_claim_status_write_errors_total", map[string]string{"driver": gpuDriver}); n != 0 {
		b.Errorf("%v status writes failed", n)
	}
}
