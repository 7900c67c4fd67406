// Package piecemeal holds the kubelet end-to-end scenarios of the piecemeal
// driver (examples/piecemeal-driver): a DRA kubelet plugin built on the
// upstream kubeletplugin helper and dranode's cdi, claimcache and
// sliceclient modules, without the agent. They are the agent's scenarios
// (package e2e) run against that binary: the kubelet's own plugin manager
// and DRA manager (k8s.io/kubernetes v1.37.2) talk to it over its sockets,
// the real control plane and scheduler allocate its published devices, and
// every CDI ID the kubelet gets back is resolved through the reference CDI
// library.
//
// The package has no code besides the tests.
package piecemeal
