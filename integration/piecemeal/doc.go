// Package piecemeal tests the example driver built on dranode's modules
// piecemeal (github.com/dranode/dranode/examples/piecemeal-driver) against
// a real kube-apiserver and etcd (tools/envtest), from the outside: its Run
// is called as its main calls it, and the kubelet's gRPC API on its sockets
// judges it. The driver's own module keeps the tests that need no control
// plane.
package piecemeal
