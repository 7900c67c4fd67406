package claimstatus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/dranode/dranode/sliceclient/claimstatus"
	"github.com/dranode/dranode/tools/envtest"
)

const (
	gpuDriver = "gpu.example.com"
	nicDriver = "nic.example.com"
	nodeName  = "node-a"
)

var (
	envOnce   sync.Once
	envShared *envtest.Environment
	envConfig *rest.Config
	envErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if envShared != nil {
		if err := envShared.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}
	os.Exit(code)
}

// controlPlane returns the admin config of the package's control plane.
func controlPlane(t *testing.T) *rest.Config {
	t.Helper()
	envOnce.Do(func() {
		envShared = &envtest.Environment{}
		envConfig, envErr = envShared.Start()
		if envErr != nil {
			envShared = nil
		}
	})
	if envErr != nil {
		t.Fatalf("starting the control plane (build it with `make -C <repo> controlplane`): %v", envErr)
	}
	return rest.CopyConfig(envConfig)
}

func writer(t *testing.T, cfg *rest.Config, driver string) *claimstatus.Writer {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := claimstatus.New(claimstatus.Options{REST: c.ResourceV1().RESTClient(), DriverName: driver})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// createAllocated creates a claim allocated on node with one device of each
// driver named, as the scheduler allocates node-local devices.
func createAllocated(t *testing.T, client kubernetes.Interface, namespace, name, node string, drivers ...string) *resourcev1.ResourceClaim {
	t.Helper()
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	var results []resourcev1.DeviceRequestAllocationResult
	for _, d := range drivers {
		req := strings.Split(d, ".")[0]
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourcev1.DeviceRequest{Name: req, Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: req}})
		results = append(results, resourcev1.DeviceRequestAllocationResult{Request: req, Driver: d, Pool: "pool-a", Device: req + "-0"},
			resourcev1.DeviceRequestAllocationResult{Request: req, Driver: d, Pool: "pool-a", Device: req + "-1"})
	}
	created, err := client.ResourceV1().ResourceClaims(namespace).Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Allocation = &resourcev1.AllocationResult{
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}},
		Devices: resourcev1.DeviceAllocationResult{Results: results},
	}
	created, err = client.ResourceV1().ResourceClaims(namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func ref(c *resourcev1.ResourceClaim) claimstatus.Claim {
	return claimstatus.Claim{Namespace: c.Namespace, Name: c.Name, UID: c.UID}
}

func ready(device string) resourcev1.AllocatedDeviceStatus {
	return resourcev1.AllocatedDeviceStatus{
		Pool: "pool-a", Device: device,
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Prepared", LastTransitionTime: metav1.Now()}},
		Data:       &runtime.RawExtension{Raw: []byte(`{"uuid":"` + device + `-uuid"}`)},
	}
}

// entries reads the claim's status.devices as "driver/pool/device" sorted.
func entries(t *testing.T, client kubernetes.Interface, c *resourcev1.ResourceClaim) []string {
	t.Helper()
	got, err := client.ResourceV1().ResourceClaims(c.Namespace).Get(context.Background(), c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range got.Status.Devices {
		out = append(out, d.Driver+"/"+d.Pool+"/"+d.Device)
	}
	slices.Sort(out)
	return out
}

// TestTwoDriversApplyAndClear: each driver's writer owns its entries only;
// applying fewer devices and clearing remove exactly the writer's own.
func TestTwoDriversApplyAndClear(t *testing.T) {
	cfg := controlPlane(t)
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	claim := createAllocated(t, client, "two", "both", nodeName, gpuDriver, nicDriver)
	gpu, nic := writer(t, cfg, gpuDriver), writer(t, cfg, nicDriver)

	if err := gpu.Apply(ctx, ref(claim), []resourcev1.AllocatedDeviceStatus{ready("gpu-0"), ready("gpu-1")}); err != nil {
		t.Fatal(err)
	}
	nicStatus := ready("nic-0")
	nicStatus.NetworkData = &resourcev1.NetworkDeviceData{InterfaceName: "eth1", IPs: []string{"10.1.2.3/24"}, HardwareAddress: "ea:9f:00:00:00:01"}
	if err := nic.Apply(ctx, ref(claim), []resourcev1.AllocatedDeviceStatus{nicStatus}); err != nil {
		t.Fatal(err)
	}
	want := []string{gpuDriver + "/pool-a/gpu-0", gpuDriver + "/pool-a/gpu-1", nicDriver + "/pool-a/nic-0"}
	if got := entries(t, client, claim); !slices.Equal(got, want) {
		t.Fatalf("after both applies: %q, want %q", got, want)
	}
	got, err := client.ResourceV1().ResourceClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range got.Status.Devices {
		if d.Device == "nic-0" && (d.NetworkData == nil || d.NetworkData.InterfaceName != "eth1" || string(d.Data.Raw) != `{"uuid":"nic-0-uuid"}`) {
			t.Errorf("nic-0 stored as %+v", d)
		}
	}
	var managers []string
	for _, m := range got.ManagedFields {
		if m.Subresource == "status" && m.Operation == metav1.ManagedFieldsOperationApply {
			managers = append(managers, m.Manager)
		}
	}
	slices.Sort(managers)
	if wantM := []string{"dranode/" + gpuDriver, "dranode/" + nicDriver}; !slices.Equal(managers, wantM) {
		t.Errorf("apply managers %q, want %q", managers, wantM)
	}

	// Fewer devices: the one no longer applied goes, the other driver's stay.
	if err := gpu.Apply(ctx, ref(claim), []resourcev1.AllocatedDeviceStatus{ready("gpu-1")}); err != nil {
		t.Fatal(err)
	}
	if got, want := entries(t, client, claim), []string{gpuDriver + "/pool-a/gpu-1", nicDriver + "/pool-a/nic-0"}; !slices.Equal(got, want) {
		t.Fatalf("after applying gpu-1 only: %q, want %q", got, want)
	}
	if err := gpu.Clear(ctx, ref(claim)); err != nil {
		t.Fatal(err)
	}
	if got, want := entries(t, client, claim), []string{nicDriver + "/pool-a/nic-0"}; !slices.Equal(got, want) {
		t.Fatalf("after the gpu driver's clear: %q, want %q", got, want)
	}
	if err := nic.Clear(ctx, ref(claim)); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, client, claim); len(got) != 0 {
		t.Fatalf("after both clears: %q", got)
	}
}

// TestUIDPrecondition: a claim recreated under the same name is not
// written; clearing it, or a claim that is gone, succeeds.
func TestUIDPrecondition(t *testing.T) {
	cfg := controlPlane(t)
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	claim := createAllocated(t, client, "uid", "recreated", nodeName, gpuDriver)
	gpu := writer(t, cfg, gpuDriver)
	stale := ref(claim)
	stale.UID = types.UID("00000000-0000-0000-0000-000000000001")
	err := gpu.Apply(ctx, stale, []resourcev1.AllocatedDeviceStatus{ready("gpu-0")})
	var we *claimstatus.WriteError
	if !errors.As(err, &we) || !errors.Is(err, claimstatus.ErrClaimReplaced) || claimstatus.Reason(err) != "Replaced" {
		t.Fatalf("apply with another UID: %v (reason %q), want a *WriteError matching ErrClaimReplaced", err, claimstatus.Reason(err))
	}
	if got := entries(t, client, claim); len(got) != 0 {
		t.Errorf("the claim of another UID was written: %q", got)
	}
	if err := gpu.Clear(ctx, stale); err != nil {
		t.Errorf("clear with another UID: %v", err)
	}
	missing := claimstatus.Claim{Namespace: "uid", Name: "missing", UID: "00000000-0000-0000-0000-000000000002"}
	err = gpu.Apply(ctx, missing, []resourcev1.AllocatedDeviceStatus{ready("gpu-0")})
	if !apierrors.IsNotFound(err) || claimstatus.Reason(err) != "NotFound" {
		t.Errorf("apply to a missing claim: %v (reason %q)", err, claimstatus.Reason(err))
	}
	if err := gpu.Clear(ctx, missing); err != nil {
		t.Errorf("clear of a missing claim: %v", err)
	}
	// Refused before the server: another driver's entry.
	other := ready("gpu-0")
	other.Driver = nicDriver
	if err := gpu.Apply(ctx, ref(claim), []resourcev1.AllocatedDeviceStatus{other}); !errors.Is(err, claimstatus.ErrInvalid) {
		t.Errorf("apply of another driver's entry: %v, want ErrInvalid", err)
	}
}

// TestChartRBAC renders the chart's ClusterRole with helm, binds it as the
// chart does, and writes status as the agent's service account (a token
// bound to a pod on nodeName carries the node name; impersonation sends the
// same identity): allowed for its driver on its node's claims, refused for
// another node's claim and for a driver the chart does not name. A role
// without the per-driver rule is refused too, so the rule is necessary.
func TestChartRBAC(t *testing.T) {
	cfg := controlPlane(t)
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	role, binding := renderChartRBAC(t)
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := binding.Subjects[0]
	asAgent := func(node string) *rest.Config {
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{
			UserName: "system:serviceaccount:" + sa.Namespace + ":" + sa.Name,
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + sa.Namespace, "system:authenticated"},
			Extra:    map[string][]string{"authentication.kubernetes.io/node-name": {node}},
		}
		return c
	}
	mine := createAllocated(t, client, "rbac", "on-my-node", nodeName, gpuDriver, nicDriver)
	theirs := createAllocated(t, client, "rbac", "on-another-node", "node-b", gpuDriver)

	agent := writer(t, asAgent(nodeName), gpuDriver)
	if err := agent.Apply(ctx, ref(mine), []resourcev1.AllocatedDeviceStatus{ready("gpu-0")}); err != nil {
		t.Fatalf("the chart's role does not let the agent write its driver's status: %v", err)
	}
	if got := entries(t, client, mine); !slices.Equal(got, []string{gpuDriver + "/pool-a/gpu-0"}) {
		t.Errorf("entries %q", got)
	}
	if err := agent.Clear(ctx, ref(mine)); err != nil {
		t.Fatalf("the chart's role does not let the agent remove its driver's status: %v", err)
	}
	if got := entries(t, client, mine); len(got) != 0 {
		t.Errorf("entries after clear %q", got)
	}
	refused := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: allowed", what)
			return
		}
		if claimstatus.Reason(err) != "Forbidden" {
			t.Errorf("%s: %v, reason %q, want Forbidden", what, err, claimstatus.Reason(err))
		}
	}
	refused("another node's claim", agent.Apply(ctx, ref(theirs), []resourcev1.AllocatedDeviceStatus{ready("gpu-0")}))
	refused("a driver the chart does not name", writer(t, asAgent(nodeName), nicDriver).Apply(ctx, ref(mine), []resourcev1.AllocatedDeviceStatus{ready("nic-0")}))

	// Without the per-driver rule the status permission alone is not enough.
	var rules []rbacv1.PolicyRule
	for _, r := range role.Rules {
		if !slices.Contains(r.Resources, "resourceclaims/driver") {
			rules = append(rules, r)
		}
	}
	if len(rules) != len(role.Rules)-1 {
		t.Fatalf("the chart's role has no resourceclaims/driver rule: %+v", role.Rules)
	}
	cr, err := client.RbacV1().ClusterRoles().Get(ctx, role.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cr.Rules = rules
	if _, err := client.RbacV1().ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, func() error {
		return agent.Apply(ctx, ref(mine), []resourcev1.AllocatedDeviceStatus{ready("gpu-1")})
	}, refused)
}

// waitRefused retries write until it is refused: RBAC changes reach the
// authorizer through an informer, a moment after the update.
func waitRefused(t *testing.T, write func() error, check func(string, error)) {
	t.Helper()
	for i := 0; ; i++ {
		err := write()
		if err != nil || i == 200 {
			check("without the resourceclaims/driver rule", err)
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatal("test ended")
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// renderChartRBAC renders the chart with helm (scripts/build-helm.sh builds
// the pinned version once) and returns its ClusterRole and binding.
func renderChartRBAC(t *testing.T) (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	t.Helper()
	helm, err := exec.Command("../../scripts/build-helm.sh").Output()
	if err != nil {
		t.Fatalf("scripts/build-helm.sh: %v", err)
	}
	home := t.TempDir()
	cmd := exec.Command(strings.TrimSpace(string(helm)), "template", "rel", "../../examples/deploy/chart/dranode",
		"--namespace", "dranode", "--kube-version", "1.37.2", "--show-only", "templates/rbac.yaml")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	var role *rbacv1.ClusterRole
	var binding *rbacv1.ClusterRoleBinding
	for _, doc := range strings.Split(string(out), "\n---") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ClusterRole":
			role = &rbacv1.ClusterRole{}
			err = yaml.UnmarshalStrict([]byte(doc), role)
		case "ClusterRoleBinding":
			binding = &rbacv1.ClusterRoleBinding{}
			err = yaml.UnmarshalStrict([]byte(doc), binding)
		}
		if err != nil {
			t.Fatalf("%s: %v", meta.Kind, err)
		}
	}
	if role == nil || binding == nil || len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "ServiceAccount" {
		t.Fatalf("the chart's rbac.yaml rendered no ClusterRole and ServiceAccount binding:\n%s", out)
	}
	return role, binding
}
