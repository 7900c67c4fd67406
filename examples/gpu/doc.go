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
//	devRoot             directory of the fake /dev default /tmp/dranode-gpu/dev
//	model               model attribute            default "Example GPU 40G"
//	memory              memory capacity per GPU    default 40Gi
//	healthPollInterval  how often devRoot is read  default 1s
//	containerDevDir     device nodes' directory    default /dev for gpu.example.com,
//	                    in the container           /dev/<driverName> for other names
//
// Device gpu-N has the device node <devRoot>/gpuN, created as an empty
// regular file when missing (the simulation's hardware), and appears in the
// container as <containerDevDir>/gpuN: two instances of the plugin serve
// different driver names, so their devices never share a container path. A file
// <devRoot>/gpuN.unhealthy marks the GPU unhealthy: health reports say so
// within one poll interval, and Prepare refuses the device while the file
// exists.
//
// Opaque configuration of kind gpu.example.com/v1 GpuConfig selects
// time-slicing:
//
//	{"apiVersion": "gpu.example.com/v1", "kind": "GpuConfig",
//	 "sharing": {"strategy": "TimeSlicing", "timeSlicing": {"interval": "Short"}}}
//
// which adds GPU_SHARING_STRATEGY and GPU_TIMESLICE_INTERVAL to the container
// edits of the devices it applies to (interval Default, Short, Medium or Long).
package main
