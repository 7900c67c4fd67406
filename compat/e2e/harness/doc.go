// Package harness runs the pieces of a Kubernetes node that a DRA driver
// talks to, for end-to-end tests of dranode-agent: a control plane with the
// scheduler (tools/envtest), a Node object kept Ready, the resourceclaim
// controller's work for pods with ResourceClaimTemplates, the kubelet's own
// plugin manager and DRA manager in process, the agent and driver plugin
// binaries built from this repository and run as real processes, and CDI ID
// resolution through the reference CDI library.
//
// Nothing in it is a stand-in for the code under judgement: the kubelet side
// is the upstream code, the control plane is the upstream binaries, the agent
// is the real binary. What the harness writes itself is only what a missing
// component (kube-controller-manager, a real kubelet's node status loop)
// would otherwise do.
package harness
