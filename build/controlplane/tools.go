//go:build tools

// Package controlplane pins the Kubernetes control-plane commands and the
// etcd server that scripts/build-controlplane.sh builds for tests. The
// build tag keeps this file out of every build; it exists so that "go mod
// tidy" keeps the requirements of the imported commands.
//
// etcd is in the same module so that it builds every dependency it shares
// with Kubernetes (gRPC, x/net, protobuf, OpenTelemetry, the etcd client)
// at Kubernetes' version, and the build cache holds one compile of each:
// in a module of its own, etcd v3.6.16 compiled 9.7 MB of Go source a
// second time at other versions. etcd v3.7.0 is the version Kubernetes
// v1.37's kubeadm deploys, and its requirements are all at or below
// Kubernetes', so adding it changed no version Kubernetes builds with
// (the kubelet's and helm's build modules rely on that: they resolve
// Kubernetes' versions without etcd).
package controlplane

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
