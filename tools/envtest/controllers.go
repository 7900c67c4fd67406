package envtest

// Names of kube-controller-manager controllers, as its --controllers flag
// takes them.
const (
	ServiceAccountController      = "serviceaccount-controller"
	ServiceAccountTokenController = "serviceaccount-token-controller"
	RootCAPublisherController     = "root-ca-certificate-publisher-controller"
	DaemonSetController           = "daemonset-controller"
	ResourceClaimController       = "resourceclaim-controller"
	GarbageCollectorController    = "garbage-collector-controller"
	NamespaceController           = "namespace-controller"
	NodeLifecycleController       = "node-lifecycle-controller"
)

// DefaultControllers returns the controllers kube-controller-manager runs
// when Environment.Controllers is empty: what pods, DaemonSets and claims on
// a node need from a control plane, and nothing that judges a Node's health.
//
//   - ServiceAccountController: each namespace's "default" ServiceAccount,
//     without which admission refuses a pod that names none;
//   - ServiceAccountTokenController: the tokens of service-account token
//     Secrets (projected tokens come from the apiserver's TokenRequest);
//   - RootCAPublisherController: each namespace's kube-root-ca.crt
//     ConfigMap, which the kubelet mounts into every pod's projected
//     service-account volume (the pod does not start without it);
//   - DaemonSetController: a DaemonSet's pod for each Node, recreated when
//     deleted;
//   - ResourceClaimController: claims from a pod's ResourceClaimTemplates,
//     the pod's status.resourceClaimStatuses, reservedFor cleared and
//     generated claims deleted when pods end;
//   - GarbageCollectorController: dependents deleted with their owners;
//   - NamespaceController: a deleted namespace's contents deleted, so the
//     namespace goes.
//
// Left out on purpose: NodeLifecycleController. It marks a Node whose
// kubelet has not reported for --node-monitor-grace-period (50 s) Unknown
// and taints it unreachable, which a test's Node without a kubelet would
// be after 50 s, and which a test that restarts a kubelet must not depend
// on. It is also what removes the node.kubernetes.io/not-ready taint once a
// Node reports Ready; a test that wants that adds it (and not
// taint-eviction-controller, so that a tainted Node's pods are never
// evicted), or removes the taint itself.
func DefaultControllers() []string {
	return []string{
		ServiceAccountController,
		ServiceAccountTokenController,
		RootCAPublisherController,
		DaemonSetController,
		ResourceClaimController,
		GarbageCollectorController,
		NamespaceController,
	}
}
