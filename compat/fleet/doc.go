// Package fleet measures what a fleet of nodes costs the control plane: N
// real dranode-agent processes (with the example gpu plugin) and, side by
// side on the same control plane, N drivers on the upstream kubeletplugin
// helper (examples/piecemeal-driver), each node with its own Node object,
// kubelet directories and a minimal kubelet stand-in (Kubelet) that
// registers the driver and calls its DRA service for claims the real
// kube-scheduler allocated.
//
// Every request a node's driver makes is attributed to the node from the
// API server's audit log: each node's kubeconfig impersonates a user of its
// own (NodeUser), which the audit log records whatever client library made
// the request. The package holds the harness (audit counting, the kubelet
// stand-in, processes, /proc readings); the measurement is TestFleet, whose
// figures and their extrapolation to 5,000 nodes are in README.md.
package fleet
