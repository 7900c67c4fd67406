//go:build tools

// Package node pins the container runtime that scripts/build-node.sh builds
// for tests that run a real node: containerd and its runc shim. The build tag
// keeps this file out of every build; it exists so that "go mod tidy" keeps
// the requirements of the imported commands.
package node

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
)
