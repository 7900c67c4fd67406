//go:build linux

package workload_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/dranode/dranode/scripts/image/workload"
)

// A hostPath device volume reaches a container as a bind mount over an
// empty file; the report must see the device, not the file under it.
func TestCollectSeesBindMountedDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	dev := t.TempDir()
	target := filepath.Join(dev, "disk")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("/dev/null", target, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(target, 0) })
	r, err := workload.Collect(nil, dev, "/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	d, ok := r.Device("/dev/disk")
	if !ok || d.Type != workload.CharDevice || d.Major != 1 || d.Minor != 3 {
		t.Fatalf("bind-mounted /dev/null reported as %+v, %v; want c 1:3 (devices: %+v)", d, ok, r.Devices)
	}
}
