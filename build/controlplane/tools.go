//go:build tools

// Package controlplane pins the Kubernetes control-plane commands that
// scripts/build-controlplane.sh builds for tests. The build tag keeps this
// file out of every build; it exists so that "go mod tidy" keeps the
// requirements of the imported commands.
package controlplane

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
