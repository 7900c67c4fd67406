// Package looptest holds what the loop driver's tests share for using the
// host's real loop devices safely: the host-wide lock, the skip when the
// machine has none, and the cleanup that detaches what a test attached.
package looptest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dranode/dranode/examples/loop/loopdev"
	"github.com/dranode/dranode/tools/envtest/hostlock"
)

// Lock blocks until t holds the host-wide test lock (tools/envtest/hostlock:
// test binaries of different packages run in parallel, and two of them on
// the host's few loop devices would take each other's) and keeps it until t
// ends. Call it before attaching anything, so that it is released after
// every cleanup that detaches.
func Lock(t testing.TB) {
	t.Helper()
	hostlock.HoldT(t)
}

// Require skips t unless the process can attach loop devices (root and
// /dev/loop-control), then takes the host lock and arranges for every loop
// device whose backing file is under dir to be detached when t ends,
// whether it passed or not.
func Require(t testing.TB, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to attach loop devices")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("needs the loop driver: %v", err)
	}
	Lock(t)
	DetachUnderOnCleanup(t, dir)
}

// DetachUnderOnCleanup detaches what is under dir when t ends.
func DetachUnderOnCleanup(t testing.TB, dir string) {
	t.Cleanup(func() { DetachUnder(t, dir) })
}

// DetachUnder detaches every loop device whose backing file is under dir
// (deleted or not), and only those. It goes by sysfs's path, which is
// right for files this process attached, in its own mount namespace.
func DetachUnder(t testing.TB, dir string) {
	t.Helper()
	var host loopdev.Host
	devs, err := host.List()
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	prefix := filepath.Clean(dir) + "/"
	for _, d := range devs {
		if !d.Attached() || !strings.HasPrefix(d.BackingFile, prefix) {
			continue
		}
		if d.BackingDeleted {
			err = host.DetachStale(d.Index, d.BackingFile)
		} else {
			err = host.Detach(d.Index, d.BackingFile)
		}
		if err != nil {
			t.Errorf("cleanup: detaching loop%d (%s): %v", d.Index, d.BackingFile, err)
		}
	}
}
