package node_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dranode/dranode/scripts/image/workload"
)

// adminNamespace is where admin-access claims may be made: Kubernetes
// allocates them only in a namespace with this label.
const (
	adminNamespace  = "dra-admin"
	adminAccessName = "resource.kubernetes.io/admin-access"
)

// Issue 41: an admin-access claim (a monitoring agent's) names a device
// another running pod's claim holds. The scheduler allocates it regardless
// (admin access is exempt from exclusivity), and so must the agent: the
// claim is prepared and its pod runs beside the device's tenant, while the
// tenant's pod keeps running undisturbed.
func checkAdminAccessOnDeviceInUse(t *testing.T, c *cluster, tenant *corev1.Pod, held *resourcev1.ResourceClaim) {
	t.Helper()
	start := time.Now()
	result := held.Status.Allocation.Devices.Results[0]
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: adminNamespace, Labels: map[string]string{adminAccessName: "true"}}}
	if _, err := c.client.CoreV1().Namespaces().Create(c.ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	claim := c.claimOnDevice(adminNamespace, "monitor-"+result.Device, result)
	claim.Spec.Devices.Requests[0].Exactly.AdminAccess = new(true)
	if _, err := c.client.ResourceV1().ResourceClaims(adminNamespace).Create(c.ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the admin-access claim: %v", err)
	}
	p := c.claimPod("gpu-monitor", claim)
	c.waitDefaultServiceAccount(adminNamespace)
	c.createPod(p)
	p = c.waitRunning(adminNamespace, p.Name)
	got, err := c.client.ResourceV1().ResourceClaims(adminNamespace).Get(c.ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Allocation == nil || len(got.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("admin-access claim %s allocated %+v, want one device", claim.Name, got.Status.Allocation)
	}
	r := got.Status.Allocation.Devices.Results[0]
	if r.Device != result.Device || r.Pool != result.Pool || r.AdminAccess == nil || !*r.AdminAccess {
		t.Fatalf("admin-access claim %s got %s/%s (admin access %v), want %s/%s with admin access", claim.Name, r.Pool, r.Device, r.AdminAccess, result.Pool, result.Device)
	}
	_, spec := c.specFor(got)
	report := c.report(p.Namespace, p.Name)
	checkContainerSawSpec(t, report, spec)
	// The gpu example marks an admin-access device monitoring-only.
	if !slices.ContainsFunc(report.Env, func(e workload.EnvVar) bool { return strings.HasSuffix(e.Name, "_ACCESS") && e.Value == "monitor" }) {
		t.Errorf("the admin-access pod's environment has no GPU_DEVICE_..._ACCESS=monitor: %v", report.Env)
	}
	if tenantNow, err := c.client.CoreV1().Pods(tenant.Namespace).Get(c.ctx, tenant.Name, metav1.GetOptions{}); err != nil ||
		tenantNow.Status.Phase != corev1.PodRunning || tenantNow.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the device's tenant %s disturbed by the admin-access claim: %v", tenant.Name, err)
	}
	t.Logf("admin-access claim %s prepared on %s beside %s's claim %s", claim.Name, r.Device, tenant.Name, held.Name)
	c.deletePod(p.Namespace, p.Name)
	c.waitPodGone(p.Namespace, p.Name)
	if err := c.client.ResourceV1().ResourceClaims(adminNamespace).Delete(c.ctx, claim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitSpecGone(got)
	t.Logf("admin access beside a device's tenant: %s", time.Since(start).Round(time.Second))
}

// claimOnDevice is a claim ns/name (not yet created) whose one request,
// "gpu", of the gpu driver's class selects exactly the device r.
func (c *cluster) claimOnDevice(ns, name string, r resourcev1.DeviceRequestAllocationResult) *resourcev1.ResourceClaim {
	c.t.Helper()
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu",
			Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: driverName,
				Selectors:       []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: c.deviceSelector(r)}}},
			},
		}}}},
	}
}

// claimPod is a workload pod name in claim's namespace whose container
// uses the claim (by name, not from a template).
func (c *cluster) claimPod(name string, claim *resourcev1.ResourceClaim) *corev1.Pod {
	p := c.workloadPod(name, "")
	p.Namespace = claim.Namespace
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim.Name}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	return p
}

// deviceSelector is a CEL expression that selects exactly the allocated
// device r: its uuid attribute, read from the node's ResourceSlices (a
// selector cannot name a device).
func (c *cluster) deviceSelector(r resourcev1.DeviceRequestAllocationResult) string {
	c.t.Helper()
	d, err := c.deviceInSlices(r)
	if err != nil {
		c.t.Fatal(err)
	}
	if d != nil && d.Attributes["uuid"].StringValue != nil {
		return fmt.Sprintf("device.attributes[%q].uuid == %q", r.Driver, *d.Attributes["uuid"].StringValue)
	}
	c.t.Fatalf("no device %s/%s of %s with a uuid in the ResourceSlices", r.Pool, r.Device, r.Driver)
	return ""
}

// deviceInSlices is the device r as the node's ResourceSlices publish it,
// nil when none does.
func (c *cluster) deviceInSlices(r resourcev1.DeviceRequestAllocationResult) (*resourcev1.Device, error) {
	list, err := c.client.ResourceV1().ResourceSlices().List(c.ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + r.Driver})
	if err != nil {
		return nil, err
	}
	for _, s := range list.Items {
		if s.Spec.Pool.Name != r.Pool {
			continue
		}
		for _, d := range s.Spec.Devices {
			if d.Name == r.Device {
				return &d, nil
			}
		}
	}
	return nil, nil
}

// waitDefaultServiceAccount waits for the service-account controller to
// make a new namespace's default account, which admission requires of
// every pod.
func (c *cluster) waitDefaultServiceAccount(ns string) {
	c.t.Helper()
	var last error
	eventually(c, "the default service account of "+ns, func() (struct{}, bool) {
		_, last = c.client.CoreV1().ServiceAccounts(ns).Get(c.ctx, "default", metav1.GetOptions{})
		return struct{}{}, last == nil
	}, func() string { return fmt.Sprint(last) })
}

// waitSpecGone waits until the claim's CDI spec is removed (its unprepare).
func (c *cluster) waitSpecGone(claim *resourcev1.ResourceClaim) {
	c.t.Helper()
	eventually(c, "the CDI spec of claim "+claim.Name+" removed", func() (struct{}, bool) {
		for _, name := range c.cdiSpecs() {
			if strings.Contains(name, string(claim.UID)) {
				return struct{}{}, false
			}
		}
		return struct{}{}, true
	}, func() string { return fmt.Sprint(c.cdiSpecs()) })
}

// Issue 41: two claims share one device published with
// allowMultipleAllocations (consumable capacity), each asking a quarter of
// its memory. The scheduler gives each its own share ID of the same
// device; the agent prepares both side by side — no refusal — and each
// pod's container gets its own CDI device, with what its spec says.
func checkTwoSharesSideBySide(t *testing.T, c *cluster) {
	t.Helper()
	start := time.Now()
	dev, pool := c.multiAllocationDevice(driverName)
	memory := dev.Capacity["memory"].Value
	quarter := resource.NewQuantity(memory.Value()/4, memory.Format)
	var pods []*corev1.Pod
	var claims []*resourcev1.ResourceClaim
	for i := range 2 {
		claim := c.claimOnDevice("default", fmt.Sprintf("gpu-share-%d", i), resourcev1.DeviceRequestAllocationResult{Driver: driverName, Pool: pool, Device: dev.Name})
		claim.Spec.Devices.Requests[0].Exactly.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{"memory": *quarter}}
		if _, err := c.client.ResourceV1().ResourceClaims(claim.Namespace).Create(c.ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating claim %s: %v", claim.Name, err)
		}
		p := c.claimPod(claim.Name, claim)
		c.createPod(p)
		pods = append(pods, p)
	}
	devices := map[string]string{}
	shares := map[string]string{}
	for i, p := range pods {
		p = c.waitRunning(p.Namespace, p.Name)
		// A claim the pod names (not one of a template) is not in the
		// pod's status.
		claim, err := c.client.ResourceV1().ResourceClaims(p.Namespace).Get(c.ctx, *p.Spec.ResourceClaims[0].ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		claims = append(claims, claim)
		if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
			t.Fatalf("claim %s allocated %+v, want one device", claim.Name, claim.Status.Allocation)
		}
		r := claim.Status.Allocation.Devices.Results[0]
		if r.Device != dev.Name || r.ShareID == nil || *r.ShareID == "" {
			t.Fatalf("claim %s got %s share %v, want a share of %s", claim.Name, r.Device, r.ShareID, dev.Name)
		}
		if other, dup := shares[string(*r.ShareID)]; dup {
			t.Errorf("share ID %s given to %s and %s", *r.ShareID, other, claim.Name)
		}
		shares[string(*r.ShareID)] = claim.Name
		name, spec := c.specFor(claim)
		checkContainerSawSpec(t, c.report(p.Namespace, p.Name), spec)
		for _, d := range spec.Devices {
			id := spec.Kind + "=" + d.Name
			if other, dup := devices[id]; dup {
				t.Errorf("CDI device %s in the specs of %s and %s", id, other, claim.Name)
			}
			devices[id] = claim.Name
		}
		t.Logf("pod %s: share %s of %s, CDI spec %s", pods[i].Name, *r.ShareID, dev.Name, name)
	}
	for _, p := range pods {
		c.deletePod(p.Namespace, p.Name)
	}
	for i, p := range pods {
		c.waitPodGone(p.Namespace, p.Name)
		if err := c.client.ResourceV1().ResourceClaims(claims[i].Namespace).Delete(c.ctx, claims[i].Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		c.waitSpecGone(claims[i])
	}
	t.Logf("two shares side by side: %s", time.Since(start).Round(time.Second))
}

// multiAllocationDevice is a device of driver on the node published with
// allowMultipleAllocations and a memory capacity, and its pool.
func (c *cluster) multiAllocationDevice(driver string) (resourcev1.Device, string) {
	c.t.Helper()
	slices, err := c.client.ResourceV1().ResourceSlices().List(c.ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + driver})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, s := range slices.Items {
		for _, d := range s.Spec.Devices {
			if _, ok := d.Capacity["memory"]; ok && d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations {
				return d, s.Spec.Pool.Name
			}
		}
	}
	c.t.Fatalf("no device of %s published with allowMultipleAllocations and a memory capacity (the gpu example's shared devices, issue 41)", driver)
	return resourcev1.Device{}, ""
}
