package harness

import (
	"context"
	"fmt"
	"k8s.io/client-go/util/retry"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// PodClaimName is the name of the pod-level claim entry in pods the harness
// creates; containers refer to it.
const PodClaimName = "devices"

// podClaimNameAnnotation is how the resourceclaim controller marks which
// pod claim entry a generated claim belongs to.
const podClaimNameAnnotation = "resource.kubernetes.io/pod-claim-name"

// ClaimSpecForClasses requests one device from each class, one request per
// class (named req0, req1, ...).
func ClaimSpecForClasses(classes ...string) resourcev1.ResourceClaimSpec {
	var spec resourcev1.ResourceClaimSpec
	for i, class := range classes {
		spec.Devices.Requests = append(spec.Devices.Requests, resourcev1.DeviceRequest{
			Name:    fmt.Sprintf("req%d", i),
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1},
		})
	}
	return spec
}

// CreateTemplate creates a ResourceClaimTemplate.
func (c *Cluster) CreateTemplate(ctx context.Context, ns, name string, spec resourcev1.ResourceClaimSpec) error {
	tmpl := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: spec},
	}
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ResourceClaimTemplate %s/%s: %w", ns, name, err)
	}
	return nil
}

// CreatePod creates a pod pinned to node whose one container uses a claim
// generated from template, and then does the resourceclaim controller's
// work for it: the claim, owned by the pod, and the pod's
// status.resourceClaimStatuses entry, which the scheduler and the kubelet
// read to find the claim.
func (c *Cluster) CreatePod(ctx context.Context, ns, name, node, template string) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{NodeLabel: node},
			Containers: []corev1.Container{{
				Name:      "ctr",
				Image:     "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: PodClaimName}}},
			}},
			ResourceClaims:                []corev1.PodResourceClaim{{Name: PodClaimName, ResourceClaimTemplateName: ptr.To(template)}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
	pod, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s/%s: %w", ns, name, err)
	}
	tmpl, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, template, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: get template %s: %w", ns, name, template, err)
	}
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name + "-" + PodClaimName,
			Namespace:   ns,
			Annotations: map[string]string{podClaimNameAnnotation: PodClaimName},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: tmpl.Spec.Spec,
	}
	claim, err = c.Client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: create claim: %w", ns, name, err)
	}
	pod.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: PodClaimName, ResourceClaimName: ptr.To(claim.Name)}}
	pod, err = c.Client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: set resourceClaimStatuses: %w", ns, name, err)
	}
	return pod, nil
}

// WaitScheduled waits until every named pod is bound to a node and its
// claim is allocated and reserved for it, and returns the pods as the
// kubelet would see them, in the order of names.
func (c *Cluster) WaitScheduled(ctx context.Context, ns string, names []string, timeout time.Duration) ([]*corev1.Pod, error) {
	out := make([]*corev1.Pod, len(names))
	err := Poll(ctx, 100*time.Millisecond, timeout, fmt.Sprintf("scheduling %d pods in %s", len(names), ns), func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		claims, err := c.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		reserved := map[string]bool{} // pod UID with an allocated, reserved claim
		for _, cl := range claims.Items {
			if cl.Status.Allocation == nil {
				continue
			}
			for _, r := range cl.Status.ReservedFor {
				reserved[string(r.UID)] = true
			}
		}
		byName := map[string]*corev1.Pod{}
		for i := range pods.Items {
			byName[pods.Items[i].Name] = &pods.Items[i]
		}
		waiting := 0
		var example string
		for i, n := range names {
			p := byName[n]
			if p == nil || p.Spec.NodeName == "" || !reserved[string(p.UID)] {
				waiting++
				if example == "" {
					example = describePending(p, n)
				}
				continue
			}
			out[i] = p
		}
		if waiting > 0 {
			return false, fmt.Errorf("%d pods not bound with a reserved claim yet, e.g. %s", waiting, example)
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func describePending(p *corev1.Pod, name string) string {
	if p == nil {
		return name + " (gone)"
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
			return fmt.Sprintf("%s (%s: %s)", name, cond.Reason, cond.Message)
		}
	}
	return name + " (no scheduling verdict yet)"
}

// DeletePod force-deletes the pod (there is no kubelet to finish it) and
// then does the resourceclaim controller's work for its generated claims:
// clear status.allocation and reservedFor, drop finalizers, delete.
func (c *Cluster) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	err := c.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.ResourceClaimName == nil {
			continue
		}
		if err := c.DeleteClaim(ctx, pod.Namespace, *st.ResourceClaimName); err != nil {
			return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	return nil
}

// DeleteClaim deallocates and deletes a claim the way the resourceclaim
// controller does once no pod uses it.
func (c *Cluster) DeleteClaim(ctx context.Context, ns, name string) error {
	claims := c.Client.ResourceV1().ResourceClaims(ns)
	var claim *resourcev1.ResourceClaim
	// The agent may write the claim's device status meanwhile: retry on a
	// conflict with a fresh object, as the controller does.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		if claim, err = claims.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if claim.Status.Allocation == nil && len(claim.Status.ReservedFor) == 0 {
			return nil
		}
		claim.Status.Allocation = nil
		claim.Status.ReservedFor = nil
		claim, err = claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deallocate claim %s/%s: %w", ns, name, err)
	}
	if len(claim.Finalizers) > 0 {
		claim.Finalizers = slices.DeleteFunc(claim.Finalizers, func(string) bool { return true })
		if _, err = claims.Update(ctx, claim, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("drop finalizers of claim %s/%s: %w", ns, name, err)
		}
	}
	if err := claims.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete claim %s/%s: %w", ns, name, err)
	}
	return nil
}

// SchedulePods creates count pods named prefix-0, prefix-1, … with a claim
// from template, pinned to node, and waits until the scheduler has bound
// them all there.
func (c *Cluster) SchedulePods(ctx context.Context, ns, node, prefix string, count int, template string) ([]*corev1.Pod, error) {
	names := make([]string, 0, count)
	for i := range count {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if _, err := c.CreatePod(ctx, ns, name, node, template); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	pods, err := c.WaitScheduled(ctx, ns, names, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		if p.Spec.NodeName != node {
			return nil, fmt.Errorf("pod %s/%s bound to %q, want %q", ns, p.Name, p.Spec.NodeName, node)
		}
	}
	return pods, nil
}
