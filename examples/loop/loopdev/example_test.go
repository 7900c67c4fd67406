package loopdev_test

import (
	"fmt"
	"os"

	"github.com/dranode/dranode/examples/loop/loopdev"
)

// What sysfs says about a loop device whose file was unlinked.
func ExampleParseBackingFile() {
	path, deleted := loopdev.ParseBackingFile("/var/lib/dranode/loop/disk-0.img (deleted)\n")
	fmt.Println(path, deleted)
	// Output: /var/lib/dranode/loop/disk-0.img true
}

// A driver's whole life with one device: attach a file it owns, hand out
// the node, zero it between users, detach it. (Needs root; not run.)
func ExampleHost() {
	var host loopdev.Host // /sys, /dev, /dev/loop-control
	const file = "/var/lib/example/disk-0.img"
	if err := os.WriteFile(file, make([]byte, 1<<20), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	dev, err := host.Attach(file)
	if err != nil {
		fmt.Println(err) // names the cause: no loop-control, no free device, ...
		return
	}
	fmt.Printf("%s is b %d:%d, %d bytes\n", host.NodePath(dev.Index), dev.Major, dev.Minor, dev.Size)
	if err := host.Zero(dev.Index, file); err != nil {
		fmt.Println(err)
	}
	if err := host.Detach(dev.Index, file); err != nil {
		fmt.Println(err)
	}
}
