// Package drabench measures DRA drivers from the kubelet's side: the
// kubelet's own DRA manager (k8s.io/kubernetes/pkg/kubelet/cm/dra) on a real
// control plane, against a null driver (the floor), dranode-agent with the
// example gpu plugin, and a driver on the upstream kubeletplugin helper
// (examples/piecemeal-driver). Timings are benchmarks only (BENCHMARKS.md);
// the tests hold costs that do not depend on timing. See README.md.
package drabench
