package node_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Issue 40: device health and device status as each Kubernetes minor has
// them, on the shipped chart. A running pod's GPU turns unhealthy (the gpu
// example's marker file, read every second here instead of every minute):
//
//   - the kubelet shows it in the pod's allocatedResourcesStatus as
//     Unhealthy: on 1.36 and later with their default gates, before with
//     ResourceHealthStatus turned on, as an operator of those minors must;
//   - the device is kept from new allocations: tainted where the API server
//     has device taints on by default (1.36 and later), withdrawn from the
//     slice before; a claim that can only have that device stays
//     unschedulable, and is allocated it once the device is healthy again;
//   - the agent writes that claim's device status (KEP-4817) with the
//     chart's RBAC, and the API server drops it with the allocation when
//     the resourceclaim controller deallocates the claim after its pod.
func TestUnhealthyDeviceInPodStatus(t *testing.T) {
	m := testMinors(t)
	var markers string
	c := startClusterOpts(t, clusterOptions{
		gates: turnOn(m, featureGate{"ResourceHealthStatus", 36}),
		values: func(c *cluster) map[string]any {
			// Under the chart's stateDir: mounted at the same path in
			// the agent's pod, so the test writes the markers from here.
			markers = filepath.Join(c.node.Dir(), "dranode", "gpu-health")
			return map[string]any{"drivers": map[string]any{"gpu": map[string]any{
				"sha256": testImages.pluginSHA256["gpu"],
				"config": map[string]any{"numDevices": 2, "devRoot": markers, "healthPollInterval": "1s"},
			}}}
		},
	})
	// Where the API server's minor has device taints off by default, the
	// agent withdraws unhealthy devices from its first write on.
	withdraws := m.apiServer < 36
	if got := c.metric("dranode_device_taints_unused"); (got == 1) != withdraws {
		t.Errorf("dranode_device_taints_unused = %v at start on an API server of 1.%d", got, m.apiServer)
	}

	// Which claims' health a kubelet puts into the pod's status differs:
	// the 1.34 kubelet compares the pod's entry name with the claim's
	// name, so only a claim named as its entry (not from a template); the
	// 1.35 kubelet looks the claim up in the pod's status, which names
	// only claims from templates; 1.36 and later find either. The tenant's
	// claim is the kind its kubelet reports on.
	var tenant *corev1.Pod
	var claim *resourcev1.ResourceClaim
	if m.kubelet < 35 {
		named := &resourcev1.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: "default"},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
				Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: driverName},
			}}}},
		}
		if _, err := c.client.ResourceV1().ResourceClaims("default").Create(c.ctx, named, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tenant = c.claimPod("gpu-tenant", named)
		c.createPod(tenant)
		tenant = c.waitRunning(tenant.Namespace, tenant.Name)
		var err error
		if claim, err = c.client.ResourceV1().ResourceClaims("default").Get(c.ctx, named.Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.client.ResourceV1().ResourceClaims("default").Delete(c.ctx, named.Name, metav1.DeleteOptions{})
		})
	} else {
		c.applySample(claimTemplateSample)
		tenant, claim = c.startClaimPod("gpu-tenant")
	}
	result := claim.Status.Allocation.Devices.Results[0]
	// Read while the device is still in the slices.
	next := c.claimOnDevice("default", "next-on-"+result.Device, result)
	n, ok := strings.CutPrefix(result.Device, "gpu-")
	if !ok {
		t.Fatalf("claim %s got %q, want one of the gpu example's gpu-N", claim.Name, result.Device)
	}
	marker := filepath.Join(markers, "gpu"+n+".unhealthy")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s marked unhealthy (%s)", m, result.Device, marker)

	// The kubelet's view, in the pod's status: the claim's one device
	// (named by its CDI device ID there) Unhealthy.
	var lastHealth string
	c.eventually("pod "+tenant.Name+" showing its GPU Unhealthy", func() (*corev1.Pod, bool) {
		p, err := c.client.CoreV1().Pods(tenant.Namespace).Get(c.ctx, tenant.Name, metav1.GetOptions{})
		if err != nil {
			lastHealth = err.Error()
			return nil, false
		}
		lastHealth = fmt.Sprintf("%+v", p.Status.ContainerStatuses)
		for _, cs := range p.Status.ContainerStatuses {
			for _, rs := range cs.AllocatedResourcesStatus {
				if len(rs.Resources) == 1 && rs.Resources[0].Health == corev1.ResourceHealthStatusUnhealthy {
					t.Logf("pod %s: %s: %s %s", p.Name, rs.Name, rs.Resources[0].ResourceID, rs.Resources[0].Health)
					return p, true
				}
			}
		}
		return nil, false
	}, func() string { return lastHealth })

	// The scheduler's view, in the slices.
	want := "tainted"
	if withdraws {
		want = "withdrawn"
	}
	var lastSlices string
	eventually(c, result.Device+" "+want+" in the slices", func() (struct{}, bool) {
		got, err := c.deviceInSlices(result)
		lastSlices = fmt.Sprint(got, err)
		switch {
		case err != nil:
			return struct{}{}, false
		case want == "withdrawn":
			return struct{}{}, got == nil
		default:
			return struct{}{}, got != nil && len(got.Taints) > 0
		}
	}, func() string { return lastSlices })
	if w := c.metric(fmt.Sprintf("dranode_devices_withdrawn{driver=%q}", driverName)); (want == "withdrawn") != (w == 1) {
		t.Errorf("dranode_devices_withdrawn = %v with the device %s", w, want)
	}
	c.endPods("the tenant's claim unprepared", tenant)

	// A claim that can only have the unhealthy device waits for it.
	if _, err := c.client.ResourceV1().ResourceClaims(next.Namespace).Create(c.ctx, next, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := c.claimPod("gpu-next", next)
	c.createPod(p)
	var lastCond string
	c.eventually("pod "+p.Name+" unschedulable while "+result.Device+" is unhealthy", func() (*corev1.Pod, bool) {
		got, err := c.client.CoreV1().Pods(p.Namespace).Get(c.ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			lastCond = err.Error()
			return nil, false
		}
		if got.Spec.NodeName != "" {
			t.Fatalf("pod %s scheduled to %s while its only device %s is unhealthy", p.Name, got.Spec.NodeName, result.Device)
		}
		lastCond = fmt.Sprintf("%+v", got.Status.Conditions)
		for _, cond := range got.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				t.Logf("pod %s: %s", p.Name, cond.Message)
				return got, true
			}
		}
		return nil, false
	}, func() string { return lastCond })
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	p = c.waitRunning(p.Namespace, p.Name)
	t.Logf("pod %s running on %s %s after it turned healthy", p.Name, result.Device, time.Since(healed).Round(100*time.Millisecond))

	// Device status: written by the agent, gone with the allocation.
	var lastStatus string
	eventually(c, "the device status in claim "+next.Name, func() (struct{}, bool) {
		got, err := c.client.ResourceV1().ResourceClaims(next.Namespace).Get(c.ctx, next.Name, metav1.GetOptions{})
		lastStatus = fmt.Sprint(statusOf(got), err)
		return struct{}{}, err == nil && len(statusOf(got)) == 1 && statusOf(got)[0].Device == result.Device && len(statusOf(got)[0].Conditions) > 0
	}, func() string { return lastStatus })
	c.deletePod(p.Namespace, p.Name)
	c.waitPodGone(p.Namespace, p.Name)
	deallocated := eventually(c, "claim "+next.Name+" deallocated", func() (*resourcev1.ResourceClaim, bool) {
		got, err := c.client.ResourceV1().ResourceClaims(next.Namespace).Get(c.ctx, next.Name, metav1.GetOptions{})
		lastStatus = fmt.Sprint(err)
		return got, err == nil && got.Status.Allocation == nil
	}, func() string { return lastStatus })
	if s := deallocated.Status.Devices; len(s) != 0 {
		t.Errorf("claim %s deallocated with its device status kept: %+v", next.Name, s)
	}
	c.waitSpecGone(deallocated)
	c.waitRecorded(0)
	if err := c.client.ResourceV1().ResourceClaims(next.Namespace).Delete(c.ctx, next.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func statusOf(claim *resourcev1.ResourceClaim) []resourcev1.AllocatedDeviceStatus {
	if claim == nil {
		return nil
	}
	return claim.Status.Devices
}
