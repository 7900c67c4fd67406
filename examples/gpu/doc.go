// Command gpu-plugin is a simulated GPU driver plugin for the dranode agent:
// it publishes N GPUs from its configuration and prepares them with CDI
// container edits, without any hardware.
//
// Build it with
//
//	go build -o gpu-plugin ./gpu
//
// and name it in the agent's plugin list (see ../config). Its configuration
// section (JSON, or the agent's YAML turned into JSON):
//
//	driverName          DRA driver name            default gpu.example.com
//	numDevices          number of GPUs, 0..4096    default 8
//	hostDeviceNode      real device node behind    default /dev/null
//	                    every simulated GPU
//	devRoot             directory of the health    default /tmp/dranode-gpu/dev
//	                    markers gpuN.unhealthy
//	model               model attribute            default "Example GPU 40G"
//	memory              memory capacity per GPU    default 40Gi
//	healthPollInterval  how often the markers and   default 1m
//	                    hostDeviceNode are read
//	                    (changes are also seen at
//	                    once: devRoot and the device
//	                    node's directory are watched)
//	containerDevDir     device nodes' directory    default /dev for gpu.example.com,
//	                    in the container           /dev/<driverName> for other names
//	statelessPrepare    report Prepare as leaving   default true
//	                    nothing on the node
//	                    (pluginmgr.Info)
//	sharedGPUs          GPUs shared-gpu-N, each     default 0
//	                    allocated many times
//	                    (below)
//	partitionedGPUs     GPUs partitioned-gpu-N,     default 0
//	                    whole or in partitions
//	                    (below)
//	partitions          partitions of each          default 2, 2..8
//	                    partitioned GPU
//
// # Device nodes
//
// Device gpu-N appears in the container as <containerDevDir>/gpuN, a
// device node with the type and major:minor of hostDeviceNode, which is
// the CDI deviceNode's hostPath: the container runtime (containerd, CRI-O,
// through the reference CDI library) stats the host path, creates the node
// in the container with those numbers and allows it in the container's
// device cgroup. Two instances of the plugin serve different driver names,
// so their devices never share a container path.
//
// hostDeviceNode must be a character or block device; Configure checks it
// (a runtime refuses anything else with "not a device node", and only when
// it starts the container) and fails naming the file. The default,
// /dev/null, exists on every host and in every container, hands a
// workload nothing it could harm, and needs no privilege. The alternatives
// were worse: an empty regular file per GPU, as earlier versions made,
// is refused by every runtime; a character device the plugin makes with
// mknod needs CAP_MKNOD (root, or a privileged pod), so the plugin would
// not run as a normal user (make run) and would leave device files in a
// directory the runtime must also see; a bind mount is not a device and
// would not reach the device cgroup. A driver for real hardware names its
// own nodes (/dev/nvidia0) instead, one per device.
//
// The plugin reads two files while it runs: a file <devRoot>/gpuN.unhealthy
// marks GPU N unhealthy (health reports say so within one poll interval,
// and Prepare refuses the device while the file exists), and a
// hostDeviceNode that is gone or no longer a device makes every GPU
// unhealthy and Prepare refuse, instead of writing specs the runtime would
// refuse.
//
// # Environment
//
// Each prepared GPU sets GPU_DEVICE_<DRIVER>_<N>=<uuid>, where <DRIVER> is
// the driver name in upper case with every character other than a letter
// or digit replaced by "_" (gpu.example.com: GPU_DEVICE_GPU_EXAMPLE_COM_0),
// so that a container with GPUs of two instances sees all of them. Driver
// names that differ only in "." against "-" map to the same variables.
//
// # Device status
//
// Each prepared GPU reports a status (KEP-4817), which the agent writes to
// the claim's status.devices: a Ready condition (reason Prepared) and, as
// opaque data, {"uuid": "<uuid>", "model": "<model>"}.
//
// # Admin access
//
// A device allocated with adminAccess (a claim in a namespace labelled
// resource.kubernetes.io/admin-access: "true"; GA in Kubernetes 1.36,
// beta and on by default in 1.34 and 1.35) is prepared next to its owner
// for monitoring: the container gets the device node and its
// GPU_DEVICE_... variable, plus GPU_DEVICE_<DRIVER>_<N>_ACCESS=monitor,
// and nothing about the GPU is set up or changed for it.
//
// # Shared GPUs (consumable capacity)
//
// With sharedGPUs set, shared-gpu-N is published with
// allowMultipleAllocations and a memory capacity each allocation consumes
// a part of: a quarter unless the request asks for more, in whole
// quarters (KEP-5075; beta and on by default in Kubernetes 1.36 and 1.37;
// alpha and off by default in 1.34 and 1.35, whose API servers store the
// device without those fields: the agent logs the dropped fields, and the
// device is then allocated whole, once). Every allocation carries a share
// ID; each share is prepared as its own device, so the agent gives it its
// own CDI device, with GPU_DEVICE_<DRIVER>_SHARED_<N>=<uuid> and
// GPU_DEVICE_<DRIVER>_SHARED_<N>_SHARE_<share ID>=<memory> (the memory
// the allocation consumed, or "default"); its node is
// <containerDevDir>/shared-gpuN.
//
// # Partitioned GPUs (partitionable devices)
//
// With partitionedGPUs set, the pool gets a counter set
// partitioned-gpu-N holding the GPU's memory, and devices
// partitioned-gpu-N (the whole GPU, consuming all of it) and
// partitioned-gpu-N-part-M (M < partitions, consuming an equal part
// each), so that the scheduler hands out the whole GPU or partitions of
// it, never both at once (KEP-4815; beta and on by default in Kubernetes
// 1.36 and 1.37; alpha and off in 1.34 and 1.35, where the agent
// publishes the whole GPU alone, without counters: COMPATIBILITY.md).
// Variables
// GPU_DEVICE_<DRIVER>_PARTITIONED_<N>[_PART_<M>], nodes
// partitioned-gpuN[-partM]. Health markers cover gpu-N only.
//
// # Time-slicing
//
// Opaque configuration of kind gpu.example.com/v1 GpuConfig selects
// time-slicing:
//
//	{"apiVersion": "gpu.example.com/v1", "kind": "GpuConfig",
//	 "sharing": {"strategy": "TimeSlicing", "timeSlicing": {"interval": "Short"}}}
//
// which adds GPU_DEVICE_<DRIVER>_<N>_SHARING_STRATEGY and
// GPU_DEVICE_<DRIVER>_<N>_TIMESLICE_INTERVAL to the container edits of the
// devices it applies to (interval Default, Short, Medium or Long).
package main
