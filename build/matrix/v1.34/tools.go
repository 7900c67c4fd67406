//go:build tools

// Package matrix pins the Kubernetes v1.34.4 commands that
// scripts/build-controlplane.sh and scripts/build-node.sh build when
// DRANODE_K8S=1.34 selects this minor for the version matrix (README.md
// one directory up). The build tag keeps this file out of every build; it
// exists so that "go mod tidy" keeps the requirements of the commands.
package matrix

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
