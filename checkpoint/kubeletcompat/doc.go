// Package kubeletcompat reads the kubelet's own checkpoint files, so that a
// node agent taking over from the kubelet's in-tree managers (or a tool
// inspecting a node) can see what the kubelet recorded without importing
// k8s.io/kubernetes.
//
// Two files are understood:
//
//   - dra_manager_state, the DRA manager's record of prepared claims
//     in the layout current kubelets write (checkpoint.dra.kubelet.k8s.io/v1:
//     JSON data in a string guarded by a CRC-32 checksum; v1.37 is the
//     reference), read by ReadDRAManagerState. The earlier version/entries
//     layout of Kubernetes 1.30 and before is reported as an unknown format;
//   - kubelet_internal_checkpoint, the device manager's record of device
//     assignments, in both its pre-1.20 layout (device IDs as a list) and the
//     current one (device IDs per NUMA node), read by
//     ReadDeviceManagerCheckpoint, which tells the two apart by content.
//
// Every reader verifies the checksum the kubelet stored. Damaged bytes give an
// error matching checkpoint.ErrCorrupt (a *checkpoint.CorruptError saying
// where and why; ErrChecksumMismatch and io.ErrUnexpectedEOF can be matched
// underneath), and a well-formed file of a layout this package does not know
// gives an *UnknownFormatError matching ErrUnknownFormat.
//
// Unlike the core checkpoint package, this one depends on go-spew: the device
// manager's checksum is computed over a go-spew rendering of its Go structs,
// and reproducing that rendering byte for byte is the only way to verify it.
package kubeletcompat
