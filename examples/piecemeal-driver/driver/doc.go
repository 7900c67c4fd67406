// Package driver is a DRA kubelet plugin for simulated GPUs written the way
// many vendors' drivers are: on the upstream helper
// k8s.io/dynamic-resource-allocation/kubeletplugin, which registers with the
// kubelet and serves its DRA gRPC API. Three pieces that such drivers usually
// write themselves come from dranode modules instead:
//
//   - the record of prepared claims is a claimcache.Cache (in place of a
//     hand-written checkpoint file): a prepare repeated in the same boot is
//     answered from it, a reboot (another boot ID) makes the next prepare
//     run again, and unprepare needs nothing but the claim's UID;
//   - the CDI spec of each prepared claim is written, removed and swept by
//     cdi.SpecDir, with names from cdi.QualifiedName;
//   - the devices are published as ResourceSlices by a
//     sliceclient.Publisher (in place of the helper's PublishResources).
//
// Driver implements kubeletplugin.DRAPlugin; Run wires it to the helper and
// the publisher. The devices are simulated: GPU N appears in the container
// as /dev/gpuN, a device node made from Config.HostDeviceNode (/dev/null by
// default: a real character device, which container runtimes require and
// which needs no privilege, unlike a node made with mknod), with its UUID in
// GPU_DEVICE_<DRIVER>_<N> (EnvName); a file "gpuN.unhealthy" in
// Config.DevRoot makes the driver refuse to prepare it.
package driver
