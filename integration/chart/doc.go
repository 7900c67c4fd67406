// Package chart tests the Helm chart (examples/deploy/chart/dranode) against
// a real kube-apiserver: what its PodSecurity admission says about the
// rendered DaemonSet, as shipped and with a vendor's opt-ins.
package chart
