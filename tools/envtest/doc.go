// Package envtest starts a real Kubernetes control plane (etcd,
// kube-apiserver and, on request, kube-scheduler) on loopback for tests.
//
// It is filled in by the control-plane issue; it has no functionality yet.
package envtest
