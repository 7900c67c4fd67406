// Package checkpoint mirrors the Go types of the kubelet device manager's
// checkpoint format before Kubernetes 1.20 (device IDs as a flat list) so that
// its checksum can be recomputed.
//
// The types carry the names the kubelet used at the time (PodDevicesEntry,
// checkpointData in a package named checkpoint), because the checksum is
// FNV-32a over a go-spew "%#v" rendering that spells them out. The rendering
// configuration also differs from the current format's: pointer addresses and
// capacities were not yet disabled.
package checkpoint
