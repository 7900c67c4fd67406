// Package e2e holds end-to-end tests in which the kubelet is the judge: the
// kubelet's own plugin manager and DRA manager (k8s.io/kubernetes v1.37.2)
// talk to a real dranode-agent process over its sockets, against a real
// etcd, kube-apiserver and kube-scheduler, and every CDI ID the kubelet gets
// back is resolved through the reference CDI library.
//
// The package has no code of its own besides the tests; the harness they use
// is in the harness subpackage.
package e2e
