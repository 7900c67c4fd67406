package workload

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Collect builds the report of a process: environ is its environment
// (os.Environ()), devDir the device directory to walk ("/dev"), mountinfo
// the mount table to read ("/proc/self/mountinfo"). Device paths are
// reported as seen below devDir, joined to "/dev", so a harness can pass
// a copy of /dev. What cannot be read is listed in [Report.Errors]; Collect
// fails only when it cannot read mountinfo at all.
func Collect(environ []string, devDir, mountinfo string) (Report, error) {
	r := Report{Schema: Schema, Env: envFrom(environ), Devices: []Device{}, Mounts: []Mount{}}
	walkErr := filepath.WalkDir(devDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			r.Errors = append(r.Errors, err.Error())
			if d != nil && d.IsDir() && path != devDir {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		// Not d.Type(): a device bind-mounted into /dev (a hostPath volume)
		// has the type of the empty file the runtime made as its mount
		// point in the directory; only a stat crosses the mount.
		info, err := d.Info()
		if err != nil {
			r.Errors = append(r.Errors, err.Error())
			return nil
		}
		if info.Mode()&fs.ModeDevice == 0 {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		rel, _ := filepath.Rel(devDir, path)
		dev := Device{Path: filepath.Join("/dev", rel), Type: BlockDevice, Major: major(st.Rdev), Minor: minor(st.Rdev)}
		if info.Mode()&fs.ModeCharDevice != 0 {
			dev.Type = CharDevice
		}
		r.Devices = append(r.Devices, dev)
		return nil
	})
	if walkErr != nil {
		r.Errors = append(r.Errors, walkErr.Error())
	}
	sort.Slice(r.Devices, func(i, j int) bool { return r.Devices[i].Path < r.Devices[j].Path })

	f, err := os.Open(mountinfo)
	if err != nil {
		return r, fmt.Errorf("workload: %w", err)
	}
	defer f.Close()
	mounts, bad, err := parseMountinfo(bufio.NewScanner(f))
	if err != nil {
		return r, fmt.Errorf("workload: %s: %w", mountinfo, err)
	}
	r.Mounts = mounts
	for _, line := range bad {
		r.Errors = append(r.Errors, fmt.Sprintf("%s: unparsable line %q", mountinfo, line))
	}
	return r, nil
}

// major and minor decode a Linux dev_t as glibc's gnu_dev_major/minor do.
func major(dev uint64) uint32 { return uint32(((dev >> 8) & 0xfff) | ((dev >> 32) &^ 0xfff)) }
func minor(dev uint64) uint32 { return uint32((dev & 0xff) | ((dev >> 12) &^ 0xff)) }

// parseMountinfo reads proc(5)'s mountinfo format:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// (ID, parent, major:minor, root, mount point, options, optional fields up
// to "-", fs type, source, super options). Lines that do not fit are
// returned in bad rather than dropped.
func parseMountinfo(sc *bufio.Scanner) (mounts []Mount, bad []string, err error) {
	mounts = []Mount{}
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 6 || sep < 0 || sep+2 >= len(fields) {
			if strings.TrimSpace(line) != "" {
				bad = append(bad, line)
			}
			continue
		}
		mounts = append(mounts, Mount{
			MountPoint: unescapeOctal(fields[4]),
			Root:       unescapeOctal(fields[3]),
			FSType:     unescapeOctal(fields[sep+1]),
			Source:     unescapeOctal(fields[sep+2]),
		})
	}
	return mounts, bad, sc.Err()
}

// unescapeOctal undoes the kernel's \ooo escapes of space, tab, newline
// and backslash in mountinfo fields.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
