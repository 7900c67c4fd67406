//go:build tools

// Package etcd pins the etcd server that scripts/build-controlplane.sh builds
// for tests. It is a module of its own because k8s.io/kubernetes requires a
// newer etcd server module indirectly, and minimal version selection in a
// shared module would silently build that one instead of the 3.6 release.
package etcd

import _ "go.etcd.io/etcd/server/v3"
