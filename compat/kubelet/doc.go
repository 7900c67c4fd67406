// Package kubelet is a test harness that runs the kubelet's own checkpoint
// code (k8s.io/kubernetes v1.37.2) next to dranode's: it produces the golden
// files that checkpoint/kubeletcompat is tested against, checks that
// kubeletcompat reads whatever the kubelet writes, and benchmarks the
// kubelet's DRA checkpointer side by side with the dranode checkpoint journal.
//
// The module lives outside go.work so that k8s.io/kubernetes and its staging
// modules never decide the workspace's dependency versions; build and test it
// with GOWORK=off.
package kubelet
