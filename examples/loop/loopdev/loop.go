package loopdev

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrNoFreeDevice is wrapped by Attach's error when every loop device it
// may use is taken.
var ErrNoFreeDevice = errors.New("no free loop device")

// ErrNotHeld is wrapped by Detach's and Zero's errors when the loop device
// does not hold the file the caller named: someone else's device, which a
// driver must leave alone.
var ErrNotHeld = errors.New("loop device does not hold the file")

// Host names where the kernel's loop interfaces are. The zero value is
// the host's own (/sys, /dev, /dev/loop-control).
type Host struct {
	SysRoot string // default /sys
	DevDir  string // default /dev
	Control string // default <DevDir>/loop-control
	// Allowed, when not empty, are the only loop device indices Attach
	// uses, found free in sysfs; otherwise Attach asks the kernel for any
	// free one (LOOP_CTL_GET_FREE), which creates a device if none is free.
	Allowed []int
}

func (h Host) sysRoot() string {
	if h.SysRoot == "" {
		return "/sys"
	}
	return h.SysRoot
}

func (h Host) devDir() string {
	if h.DevDir == "" {
		return "/dev"
	}
	return h.DevDir
}

func (h Host) control() string {
	if h.Control == "" {
		return filepath.Join(h.devDir(), "loop-control")
	}
	return h.Control
}

// List is List under h's sysfs.
func (h Host) List() ([]Device, error) { return List(h.sysRoot()) }

// Tag is the name Attach gives the loop device of file (the loop
// device's lo_file_name), by which Held finds it again. The path the
// kernel shows in sysfs is no proof: the kernel prints it relative to the
// reader's mount namespace, so a plugin in a new container (the agent's
// pod replaced) would see another path, or none, for the file an earlier
// container attached. A digest of the path fits the field's 63 bytes
// whatever the path's length.
func Tag(file string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(file)))
	return "dranode:" + hex.EncodeToString(sum[:16])
}

// Held finds the loop devices Attach attached file to: live ones, which
// hold file itself (its inode), and stale ones, which hold a file that
// was unlinked from that path (sysfs says "(deleted)"). A device holding
// anything else is not file's, whatever its name or path, and is in
// neither list.
func (h Host) Held(file string) (live, stale []Device, err error) {
	// The file first, then sysfs: a file unlinked in between is then seen
	// deleted in sysfs, never missing by name while sysfs still shows it.
	var st unix.Stat_t
	statErr := unix.Stat(file, &st)
	all, err := h.List()
	if err != nil {
		return nil, nil, err
	}
	tag := Tag(file)
	for _, d := range all {
		if !d.Attached() {
			continue
		}
		// A device that cannot be asked (detached or removed since the
		// listing, or not openable by this process) cannot be proven
		// file's, and is not.
		info, err := h.status(d.Index)
		if err != nil || cString(info.File_name[:]) != tag {
			continue
		}
		switch {
		case d.BackingDeleted:
			stale = append(stale, d)
		case statErr == nil && info.Inode == st.Ino && info.Device == st.Dev:
			live = append(live, d)
		}
	}
	return live, stale, nil
}

// status is LOOP_GET_STATUS64 of loop device index.
func (h Host) status(index int) (*unix.LoopInfo64, error) {
	lf, err := os.Open(h.NodePath(index))
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	info, err := unix.IoctlLoopGetStatus64(int(lf.Fd()))
	if err != nil {
		return nil, fmt.Errorf("LOOP_GET_STATUS64 on %s: %w", h.NodePath(index), err)
	}
	return info, nil
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// NodePath is loop device index's node under h's device directory.
func (h Host) NodePath(index int) string {
	return filepath.Join(h.devDir(), "loop"+strconv.Itoa(index))
}

// busyRetries bounds how often Attach picks another device after losing a
// race for a free one to another process (EBUSY from LOOP_CONFIGURE).
const busyRetries = 16

// Attach attaches file, read-write, to a free loop device and returns the
// device as sysfs shows it afterwards.
func (h Host) Attach(file string) (Device, error) {
	bf, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return Device{}, fmt.Errorf("opening backing file: %w", err)
	}
	defer bf.Close()
	tried := map[int]bool{}
	for range busyRetries {
		idx, err := h.free(tried)
		if err != nil {
			return Device{}, err
		}
		tried[idx] = true
		err = h.configure(idx, bf, file)
		if errors.Is(err, unix.EBUSY) {
			continue // taken between the look and the ioctl
		}
		if err != nil {
			return Device{}, err
		}
		d, err := Read(h.sysRoot(), idx)
		if err != nil {
			return Device{}, fmt.Errorf("reading loop%d after attaching %s: %w", idx, file, err)
		}
		return d, nil
	}
	return Device{}, fmt.Errorf("attaching %s: %w: every device tried (%d) was taken by another process first", file, ErrNoFreeDevice, busyRetries)
}

// free picks a free loop device not in tried.
func (h Host) free(tried map[int]bool) (int, error) {
	if len(h.Allowed) > 0 {
		for _, idx := range h.Allowed {
			if tried[idx] {
				continue
			}
			d, err := Read(h.sysRoot(), idx)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return 0, err
			}
			if !d.Attached() {
				return idx, nil
			}
		}
		return 0, fmt.Errorf("%w among the allowed loop devices %v", ErrNoFreeDevice, h.Allowed)
	}
	ctl, err := os.OpenFile(h.control(), os.O_RDWR, 0)
	if err != nil {
		return 0, fmt.Errorf("opening the loop control device (is the loop module loaded, and is the device in this container?): %w", err)
	}
	defer ctl.Close()
	idx, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
	if err != nil {
		// The kernel refuses to create another device (max_loop, or
		// memory): nothing is free.
		return 0, fmt.Errorf("%w: LOOP_CTL_GET_FREE on %s: %w", ErrNoFreeDevice, h.control(), err)
	}
	return idx, nil
}

// configure attaches bf to loop device idx: LOOP_CONFIGURE, one atomic
// ioctl, or on kernels before 5.8 LOOP_SET_FD then LOOP_SET_STATUS64.
func (h Host) configure(idx int, bf *os.File, name string) error {
	node := h.NodePath(idx)
	lf, err := os.OpenFile(node, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening loop device node (is it in this container's /dev?): %w", err)
	}
	defer lf.Close()
	var info unix.LoopInfo64
	copy(info.File_name[:len(info.File_name)-1], Tag(name))
	err = unix.IoctlLoopConfigure(int(lf.Fd()), &unix.LoopConfig{Fd: uint32(bf.Fd()), Info: info})
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) {
		if err = unix.IoctlSetInt(int(lf.Fd()), unix.LOOP_SET_FD, int(bf.Fd())); err == nil {
			if err = unix.IoctlLoopSetStatus64(int(lf.Fd()), &info); err != nil {
				// Leave nothing half attached.
				_ = unix.IoctlSetInt(int(lf.Fd()), unix.LOOP_CLR_FD, 0)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("attaching %s to %s: %w", name, node, err)
	}
	return nil
}

// openHeld opens loop device index and checks, on the open device, that
// it holds file: the device's backing inode is file's. Checking on the
// descriptor, not by name in sysfs, means the device cannot change hands
// between the check and the use.
func (h Host) openHeld(index int, file string) (*os.File, error) {
	node := h.NodePath(index)
	lf, err := os.OpenFile(node, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening loop device node: %w", err)
	}
	info, err := unix.IoctlLoopGetStatus64(int(lf.Fd()))
	if errors.Is(err, unix.ENXIO) {
		lf.Close()
		return nil, fmt.Errorf("%s: %w %s: nothing is attached", node, ErrNotHeld, file)
	}
	if err != nil {
		lf.Close()
		return nil, fmt.Errorf("LOOP_GET_STATUS64 on %s: %w", node, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		lf.Close()
		return nil, fmt.Errorf("%s: %w %s: %w", node, ErrNotHeld, file, err)
	}
	if info.Inode != st.Ino || info.Device != st.Dev {
		lf.Close()
		return nil, fmt.Errorf("%s: %w %s (it holds inode %d on device %d)", node, ErrNotHeld, file, info.Inode, info.Device)
	}
	return lf, nil
}

// Detach detaches loop device index if, and only if, it holds file. The
// kernel defers the detach while the device is open elsewhere.
func (h Host) Detach(index int, file string) error {
	lf, err := h.openHeld(index, file)
	if err != nil {
		return err
	}
	defer lf.Close()
	if err := unix.IoctlSetInt(int(lf.Fd()), unix.LOOP_CLR_FD, 0); err != nil {
		return fmt.Errorf("LOOP_CLR_FD on %s: %w", h.NodePath(index), err)
	}
	return nil
}

// DetachStale detaches loop device index if it is one of file's stale
// devices (see Held): its file was unlinked, and no name reaches its data
// any more.
func (h Host) DetachStale(index int, file string) error {
	node := h.NodePath(index)
	lf, err := os.OpenFile(node, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening loop device node: %w", err)
	}
	defer lf.Close()
	info, err := unix.IoctlLoopGetStatus64(int(lf.Fd()))
	if err != nil {
		return fmt.Errorf("%s: %w %s: LOOP_GET_STATUS64: %w", node, ErrNotHeld, file, err)
	}
	d, err := Read(h.sysRoot(), index)
	if err != nil {
		return err
	}
	if cString(info.File_name[:]) != Tag(file) || !d.BackingDeleted {
		return fmt.Errorf("%s: %w %s (deleted)", node, ErrNotHeld, file)
	}
	if err := unix.IoctlSetInt(int(lf.Fd()), unix.LOOP_CLR_FD, 0); err != nil {
		return fmt.Errorf("LOOP_CLR_FD on %s: %w", node, err)
	}
	return nil
}

// Zero writes zeros over all of loop device index if it holds file, and
// flushes them, so that whoever opens the device next reads zeros.
// Zeroing goes through the device, not the file, so that no page of the
// device's own cache keeps the old data.
func (h Host) Zero(index int, file string) error {
	lf, err := h.openHeld(index, file)
	if err != nil {
		return err
	}
	defer lf.Close()
	node := h.NodePath(index)
	var size uint64
	if err := ioctlPtr(lf, unix.BLKGETSIZE64, unsafe.Pointer(&size)); err != nil {
		return fmt.Errorf("BLKGETSIZE64 on %s: %w", node, err)
	}
	// BLKZEROOUT lets the loop driver punch holes in the file; a file
	// system without it gets written zeros.
	rng := [2]uint64{0, size}
	if err := ioctlPtr(lf, unix.BLKZEROOUT, unsafe.Pointer(&rng)); err != nil {
		if err := writeZeros(lf, int64(size)); err != nil {
			return fmt.Errorf("zeroing %s: %w", node, err)
		}
	}
	if err := lf.Sync(); err != nil {
		return fmt.Errorf("flushing %s: %w", node, err)
	}
	return nil
}

// ZeroFile zeroes a backing file no loop device holds: its data is
// dropped and its size kept.
func ZeroFile(file string) error {
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("zeroing backing file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("zeroing backing file %s: %w", file, err)
	}
	if err := f.Truncate(fi.Size()); err != nil {
		return fmt.Errorf("zeroing backing file %s: %w", file, err)
	}
	return f.Sync()
}

func writeZeros(f *os.File, size int64) error {
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		n := min(int64(len(buf)), size-off)
		if _, err := f.WriteAt(buf[:n], off); err != nil {
			return err
		}
	}
	return nil
}

func ioctlPtr(f *os.File, req uint, arg unsafe.Pointer) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(req), uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}
