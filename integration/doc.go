// Package integration holds the tests of dranode's library modules that need
// a real control plane (tools/envtest: etcd and kube-apiserver, built from
// source). They live in a module of their own so that no library module
// requires tools/envtest: a vendor who imports sliceclient or agent resolves
// only what those packages use. Each subdirectory tests one module from the
// outside, through its exported API. This module is never released.
package integration
