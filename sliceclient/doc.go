// Package sliceclient publishes one node's device inventory for one driver as
// resource.k8s.io/v1 ResourceSlices, with as few API writes as possible.
//
// The module is filled in by the ResourceSlice publisher issue; it has no
// functionality yet.
package sliceclient
