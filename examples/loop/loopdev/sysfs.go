package loopdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Major is the block major number of loop devices (Documentation/admin-guide/devices.txt).
const Major = 7

// SectorSize is the unit of /sys/block/*/size, whatever the device's
// logical block size.
const SectorSize = 512

// Device is one loop block device as sysfs shows it.
type Device struct {
	// Index is N of /dev/loopN.
	Index int
	// Major and Minor are the device numbers (sysfs "dev").
	Major, Minor uint32
	// Size is the device's size in bytes; 0 when nothing is attached.
	Size int64
	// ReadOnly is sysfs "ro".
	ReadOnly bool
	// BackingFile is the attached file's path as the kernel prints it, ""
	// when the device is free.
	BackingFile string
	// BackingDeleted says the attached file has been unlinked: the device
	// still reads and writes its inode, but nobody can reach it by name.
	BackingDeleted bool
}

// Attached says a backing file is attached.
func (d Device) Attached() bool { return d.BackingFile != "" }

// Path is the device node's path under devDir (normally /dev).
func (d Device) Path(devDir string) string {
	return filepath.Join(devDir, "loop"+strconv.Itoa(d.Index))
}

// List reads every loop device under sysRoot (normally /sys), by index.
func List(sysRoot string) ([]Device, error) {
	entries, err := os.ReadDir(filepath.Join(sysRoot, "block"))
	if err != nil {
		return nil, fmt.Errorf("listing loop devices: %w", err)
	}
	var out []Device
	for _, e := range entries {
		idx, ok := parseLoopName(e.Name())
		if !ok {
			continue
		}
		d, err := Read(sysRoot, idx)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed (LOOP_CTL_REMOVE) between the listing and the read
		}
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

// Read reads loop device index from sysfs.
func Read(sysRoot string, index int) (Device, error) {
	dir := filepath.Join(sysRoot, "block", "loop"+strconv.Itoa(index))
	d := Device{Index: index}
	dev, err := os.ReadFile(filepath.Join(dir, "dev"))
	if err != nil {
		return Device{}, err
	}
	if d.Major, d.Minor, err = ParseDev(string(dev)); err != nil {
		return Device{}, fmt.Errorf("%s/dev: %w", dir, err)
	}
	// The loop/ directory exists only while a file is attached.
	bf, err := os.ReadFile(filepath.Join(dir, "loop", "backing_file"))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return d, nil
	case err != nil:
		return Device{}, err
	}
	d.BackingFile, d.BackingDeleted = ParseBackingFile(string(bf))
	size, err := os.ReadFile(filepath.Join(dir, "size"))
	if err != nil {
		return Device{}, err
	}
	sectors, err := ParseUint(string(size))
	if err != nil || sectors > 1<<54 {
		return Device{}, fmt.Errorf("%s/size: %q is not a sector count", dir, size)
	}
	d.Size = int64(sectors) * SectorSize
	ro, err := os.ReadFile(filepath.Join(dir, "ro"))
	if err != nil {
		return Device{}, err
	}
	flag, err := ParseUint(string(ro))
	if err != nil || flag > 1 {
		return Device{}, fmt.Errorf("%s/ro: %q is not 0 or 1", dir, ro)
	}
	d.ReadOnly = flag == 1
	return d, nil
}

func parseLoopName(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "loop")
	if !ok || s == "" {
		return 0, false
	}
	n, err := parseDigits(s)
	if err != nil || n > 1<<20 {
		return 0, false
	}
	return int(n), true
}

// ParseUint parses a sysfs number: decimal digits and a trailing newline.
func ParseUint(s string) (uint64, error) {
	return parseDigits(strings.TrimSuffix(s, "\n"))
}

// parseDigits parses decimal digits and nothing else.
func parseDigits(s string) (uint64, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a decimal number", s)
	}
	return strconv.ParseUint(s, 10, 64)
}

// ParseDev parses sysfs "dev", "MAJOR:MINOR\n".
func ParseDev(s string) (major, minor uint32, err error) {
	a, b, ok := strings.Cut(strings.TrimSuffix(s, "\n"), ":")
	if !ok {
		return 0, 0, fmt.Errorf("%q is not MAJOR:MINOR", s)
	}
	ma, err := parseDigits(a)
	if err != nil || ma >= 1<<12 {
		return 0, 0, fmt.Errorf("%q: bad major", s)
	}
	mi, err := parseDigits(b)
	if err != nil || mi >= 1<<20 {
		return 0, 0, fmt.Errorf("%q: bad minor", s)
	}
	return uint32(ma), uint32(mi), nil
}

// deletedSuffix is what the kernel's d_path appends to an unlinked file.
const deletedSuffix = " (deleted)"

// ParseBackingFile parses loop/backing_file: the path and a trailing
// newline, with " (deleted)" after a path that was unlinked.
func ParseBackingFile(s string) (path string, deleted bool) {
	s = strings.TrimSuffix(s, "\n")
	path, deleted = strings.CutSuffix(s, deletedSuffix)
	return path, deleted
}
