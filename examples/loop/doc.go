// Package loop is an example DRA driver plugin for a device every Linux
// machine has: loop block devices (/dev/loopN, block major 7). Each
// device it offers, disk-N, is a file it owns under its state directory,
// attached to a loop device; a claim's container gets that loop device's
// node with its real type and numbers, so the container runtime's device
// cgroup lets the container, and only it, open the disk.
//
// The hardware-specific code is in package loopdev; this package is the
// plumbing every driver has (configuration, inventory, health, Prepare,
// Unprepare) and cmd/loop-plugin is the binary. README.md walks from "a
// device the kernel knows" to "a pod uses it".
//
// The driver keeps no state of its own: which loop device holds which
// disk is the kernel's, read from sysfs, so a plugin restarted after a
// SIGKILL knows what the killed one did, and every call is idempotent.
package loop
