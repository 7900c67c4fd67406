package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/tools/envtest"
)

// Cluster is a running control plane with the scheduler.
type Cluster struct {
	Env        *envtest.Environment
	Config     *rest.Config
	Client     kubernetes.Interface
	Kubeconfig string // admin kubeconfig file, for processes
}

// StartCluster starts etcd, kube-apiserver and kube-scheduler. The caller
// stops it with Stop. A missing binary is an error naming where it was
// looked for (envtest.BinaryError).
func StartCluster() (*Cluster, error) {
	// Audit: tests count the writes the agent made (AuditEvents).
	env := &envtest.Environment{Scheduler: true, Audit: true}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start control plane (build it with `make -C /work/main controlplane`): %w", err)
	}
	// Many pods at once: client-go's default 5 QPS would make the harness,
	// not the agent, the bottleneck.
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 500, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("client for the control plane: %w", err)
	}
	return &Cluster{Env: env, Config: cfg, Client: client, Kubeconfig: env.KubeconfigPath()}, nil
}

// Stop stops the control plane.
func (c *Cluster) Stop() error { return c.Env.Stop() }

// EnsureNamespace creates the namespace and its default ServiceAccount
// (kube-controller-manager's job; pods are refused without it).
func (c *Cluster) EnsureNamespace(ctx context.Context, name string) error {
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	_, err = c.Client.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create default ServiceAccount in %s: %w", name, err)
	}
	return nil
}

// EnsureDeviceClass creates a DeviceClass selecting every device of driver.
func (c *Cluster) EnsureDeviceClass(ctx context.Context, name, driver string) error {
	return c.EnsureDeviceClassCEL(ctx, name, fmt.Sprintf("device.driver == %q", driver))
}

// EnsureDeviceClassCEL creates a DeviceClass selecting devices by a CEL
// expression.
func (c *Cluster) EnsureDeviceClassCEL(ctx context.Context, name, expression string) error {
	class := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.DeviceClassSpec{
			Selectors: []resourcev1.DeviceSelector{{
				CEL: &resourcev1.CELDeviceSelector{Expression: expression},
			}},
		},
	}
	_, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create DeviceClass %s: %w", name, err)
	}
	return nil
}

// NodeLabel is the label pods use to land on one test's node.
const NodeLabel = "kubernetes.io/hostname"

// StartNode creates a Node object that the scheduler considers Ready and
// keeps its heartbeat and Lease fresh until ctx ends, as a kubelet's node
// status loop would. It returns when the node exists.
func (c *Cluster) StartNode(ctx context.Context, name string) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{NodeLabel: name}},
	}
	created, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	// The TaintNodesByCondition admission plugin adds a not-ready
	// NoSchedule taint on create; the node lifecycle controller would take
	// it away once the node reports Ready, and it is not running.
	if len(created.Spec.Taints) > 0 {
		created.Spec.Taints = nil
		if created, err = c.Client.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("untaint node %s: %w", name, err)
		}
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("2000"),
	}
	created.Status.Capacity = capacity
	created.Status.Allocatable = capacity
	if err := c.heartbeat(ctx, created); err != nil {
		return err
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(name),
			LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime:            &metav1.MicroTime{Time: time.Now()},
		},
	}
	if _, err := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create lease of node %s: %w", name, err)
	}
	go func() {
		ticker := time.NewTicker(10 * time.Second)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			// Errors are retried on the next tick; a stale heartbeat only
			// matters to a node lifecycle controller, which is not running.
			if n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
				_ = c.heartbeat(ctx, n)
			}
			if l, err := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{}); err == nil {
				l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
				_, _ = c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
			}
		}
	}()
	return nil
}

func (c *Cluster) heartbeat(ctx context.Context, n *corev1.Node) error {
	now := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "e2e harness", LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	if _, err := c.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update status of node %s: %w", n.Name, err)
	}
	return nil
}

// DeleteNode removes the node object (its slices stay until their owner
// goes; the tests use a node per test, so they never mix).
func (c *Cluster) DeleteNode(ctx context.Context, name string) error {
	err := c.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete node %s: %w", name, err)
	}
	return nil
}

// NodeSlices lists the ResourceSlices published for node.
func (c *Cluster) NodeSlices(ctx context.Context, node string) ([]resourcev1.ResourceSlice, error) {
	list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: resourcev1.ResourceSliceSelectorNodeName + "=" + node})
	if err != nil {
		return nil, fmt.Errorf("list slices of node %s: %w", node, err)
	}
	return list.Items, nil
}

// CountDevices counts the devices of driver in slices.
func CountDevices(slices []resourcev1.ResourceSlice, driver string) int {
	n := 0
	for _, s := range slices {
		if s.Spec.Driver == driver {
			n += len(s.Spec.Devices)
		}
	}
	return n
}

// ErrTimeout is returned by the harness's waits when the condition did not
// come true in time.
var ErrTimeout = errors.New("timed out")

// Poll calls cond every interval until it returns true or an error, or
// until timeout; the last error from cond (if any) is wrapped into the
// timeout error so a failure says what was last seen.
func Poll(ctx context.Context, interval, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok && err == nil {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%s: %w after %v (last: %v)", what, ErrTimeout, timeout, last)
			}
			return fmt.Errorf("%s: %w after %v", what, ErrTimeout, timeout)
		case <-time.After(interval):
		}
	}
}
