// Package agent tests github.com/dranode/dranode/agent against a real
// kube-apiserver and etcd (tools/envtest), from the outside: through the
// agent's exported API, the kubelet's gRPC API on its sockets and its
// metrics, as an embedder or the kubelet sees it. The agent's own module
// keeps the tests that need no control plane.
package agent
