// Package loopdev is all the hardware-specific code of the example loop
// driver: it finds loop block devices in sysfs, attaches and detaches
// backing files with the loop ioctls, and zeroes a device. Everything else
// in examples/loop is the DRA plumbing every driver shares.
//
// It talks to the kernel only through golang.org/x/sys/unix (no losetup),
// so the plugin needs no tools in its image, and every failure names the
// file and the ioctl that failed.
//
// A loop device is identified by what the kernel says it holds
// (/sys/block/loopN/loop/backing_file), never by its number alone: numbers
// are reused as soon as a device is detached, and a driver that trusted a
// remembered number would zero someone else's disk.
package loopdev
