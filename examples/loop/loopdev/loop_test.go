package loopdev_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/dranode/dranode/examples/loop/internal/looptest"
	"github.com/dranode/dranode/examples/loop/loopdev"
)

const testSize = 4 << 20

func backingFile(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(testSize); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAttachWriteZeroDetach(t *testing.T) {
	dir := t.TempDir()
	looptest.Require(t, dir)
	var host loopdev.Host
	file := backingFile(t, dir, "a.img")

	d, err := host.Attach(file)
	if err != nil {
		t.Fatal(err)
	}
	if d.Major != loopdev.Major || d.Size != testSize || d.ReadOnly || d.BackingFile != file || d.BackingDeleted {
		t.Fatalf("after attaching, sysfs says %+v", d)
	}
	live, stale, err := host.Held(file)
	if err != nil || len(live) != 1 || live[0].Index != d.Index || len(stale) != 0 {
		t.Fatalf("Held(%s) = %+v, %+v, %v; want loop%d live", file, live, stale, err, d.Index)
	}

	pattern := bytes.Repeat([]byte("dranode!"), 512)
	node, err := os.OpenFile(host.NodePath(d.Index), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.WriteAt(pattern, 4096); err != nil {
		t.Fatal(err)
	}
	if err := node.Sync(); err != nil {
		t.Fatal(err)
	}
	node.Close()
	// The pattern went through the device into the file.
	onDisk, err := os.ReadFile(file)
	if err != nil || !bytes.Equal(onDisk[4096:4096+len(pattern)], pattern) {
		t.Fatalf("the backing file does not hold what was written to the device (%v)", err)
	}

	if err := host.Zero(d.Index, file); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(host.NodePath(d.Index))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != testSize || !allZero(got) {
		t.Fatalf("after Zero the device reads %d bytes, all zero: %v", len(got), allZero(got))
	}

	if err := host.Detach(d.Index, file); err != nil {
		t.Fatal(err)
	}
	after, err := loopdev.Read("/sys", d.Index)
	if err != nil || after.Attached() {
		t.Fatalf("after Detach sysfs says %+v, %v", after, err)
	}
}

// A driver must never detach or zero a device holding another file, even
// one it attached itself a moment ago under another name.
func TestRefusesDeviceItDoesNotHold(t *testing.T) {
	dir := t.TempDir()
	looptest.Require(t, dir)
	var host loopdev.Host
	mine := backingFile(t, dir, "mine.img")
	theirs := backingFile(t, dir, "theirs.img")
	d, err := host.Attach(theirs)
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Detach(d.Index, mine); !errors.Is(err, loopdev.ErrNotHeld) {
		t.Errorf("Detach of a device holding another file = %v, want ErrNotHeld", err)
	}
	if err := host.Zero(d.Index, mine); !errors.Is(err, loopdev.ErrNotHeld) {
		t.Errorf("Zero of a device holding another file = %v, want ErrNotHeld", err)
	}
	if err := host.DetachStale(d.Index, theirs); !errors.Is(err, loopdev.ErrNotHeld) {
		t.Errorf("DetachStale of a device whose file is not deleted = %v, want ErrNotHeld", err)
	}
	if live, stale, err := host.Held(mine); err != nil || len(live)+len(stale) != 0 {
		t.Errorf("Held(%s) = %+v, %+v, %v; the device holds another file", mine, live, stale, err)
	}
	if now, err := loopdev.Read("/sys", d.Index); err != nil || now.BackingFile != theirs {
		t.Fatalf("the device changed: %+v, %v", now, err)
	}
}

func TestDeletedBackingFileShows(t *testing.T) {
	dir := t.TempDir()
	looptest.Require(t, dir)
	var host loopdev.Host
	file := backingFile(t, dir, "gone.img")
	d, err := host.Attach(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	now, err := loopdev.Read("/sys", d.Index)
	if err != nil || !now.BackingDeleted || now.BackingFile != file {
		t.Fatalf("after unlinking the file sysfs says %+v, %v", now, err)
	}
	live, stale, err := host.Held(file)
	if err != nil || len(live) != 0 || len(stale) != 1 || stale[0].Index != d.Index {
		t.Fatalf("Held(%s) after unlinking = %+v, %+v, %v; want loop%d stale", file, live, stale, err, d.Index)
	}
	// A new file at the same path is not what the device holds.
	backingFile(t, dir, "gone.img")
	if live, _, err := host.Held(file); err != nil || len(live) != 0 {
		t.Fatalf("Held(%s) with a new file there = %+v, %v; want no live device", file, live, err)
	}
	if err := host.Zero(d.Index, file); !errors.Is(err, loopdev.ErrNotHeld) {
		t.Errorf("Zero through a device holding the unlinked file = %v, want ErrNotHeld", err)
	}
	if err := host.DetachStale(d.Index, file); err != nil {
		t.Fatal(err)
	}
}

func TestAttachErrorsNameTheCause(t *testing.T) {
	dir := t.TempDir()
	looptest.Require(t, dir)
	file := backingFile(t, dir, "a.img")
	for _, tc := range []struct {
		name string
		host loopdev.Host
		file string
		want []string
		is   error
	}{
		{"missing control", loopdev.Host{Control: filepath.Join(dir, "loop-control")}, file,
			[]string{"loop control device", filepath.Join(dir, "loop-control"), "no such file"}, os.ErrNotExist},
		{"missing backing file", loopdev.Host{}, filepath.Join(dir, "nope.img"),
			[]string{"backing file", filepath.Join(dir, "nope.img")}, os.ErrNotExist},
		{"no allowed device exists", loopdev.Host{Allowed: []int{1 << 19}}, file,
			[]string{"no free loop device", "allowed"}, loopdev.ErrNoFreeDevice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.host.Attach(tc.file)
			if err == nil {
				t.Fatal("Attach succeeded")
			}
			for _, w := range tc.want {
				if !bytes.Contains([]byte(err.Error()), []byte(w)) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error %q is not %v", err, tc.is)
			}
		})
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
