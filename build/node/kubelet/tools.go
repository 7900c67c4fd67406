//go:build tools

// Package kubelet pins the kubelet that scripts/build-node.sh builds for
// tests that run a real node. The build tag keeps this file out of every
// build; it exists so that "go mod tidy" keeps the requirements of the
// imported command.
package kubelet

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
