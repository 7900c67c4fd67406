// Package envtest starts a real Kubernetes control plane on loopback for
// tests: etcd, kube-apiserver and, on request, kube-scheduler and
// kube-controller-manager (DefaultControllers: service accounts, root CA
// ConfigMaps, DaemonSets, ResourceClaims from templates, garbage
// collection, namespaces), run as child processes from binaries that
// scripts/build-controlplane.sh builds (or that DRANODE_CONTROLPLANE_BIN
// points at).
//
// Environment.Start returns an admin *rest.Config (bearer token in the
// system:masters group, TLS verified against a CA generated per
// environment) with RBAC enforced and resource.k8s.io/v1 served.
// Environment.Stop ends every process group and removes the temporary
// directory. A start that fails part way stops what it had started and
// returns an error carrying the tail of the failing process's log.
//
// Tests normally call StartT, which fails the test with the reason when
// the binaries are missing: a test that needs the control plane never skips.
package envtest
