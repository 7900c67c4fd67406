// Package checkpoint mirrors the Go types of the kubelet device manager's
// current checkpoint format (Kubernetes 1.20 and later: device IDs per NUMA
// node) so that its checksum can be recomputed.
//
// The kubelet's checksum is FNV-32a over a go-spew "%#v" rendering of the
// checkpoint data, and that rendering spells out the Go type names with their
// package name. That is why this package is named checkpoint, and why its
// types keep the kubelet's names, field order and field types: renaming or
// reordering anything here silently changes every checksum.
package checkpoint
