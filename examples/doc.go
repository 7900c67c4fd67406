// Package examples holds example driver plugins, configurations and Kubernetes
// manifests for dranode.
//
// The module is filled in by the driver-plugin issue; it has no functionality
// yet.
package examples
