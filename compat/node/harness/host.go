package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Host-wide paths the kubelet writes whatever its --root-dir.
const (
	devicePluginDir  = "/var/lib/kubelet/device-plugins"
	containerLogsDir = "/var/log/containers"
	// cniCacheDir is libcni's cache of results, one file per attachment.
	cniCacheDir   = "/var/lib/cni"
	shimSocketDir = "/run/containerd/s"
)

// hostPaths prepares the kubelet's PATH and arranges for Stop to remove
// what the kubelet creates outside the node directory.
func (n *Node) hostPaths() error {
	if err := n.kubeletPath(); err != nil {
		return fmt.Errorf("harness: kubelet PATH: %w", err)
	}
	var absent []string
	for _, d := range hostDirs {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			absent = append(absent, d)
		}
	}
	n.undo = append(n.undo, cleanupStep{"the kubelet's host-wide paths", func() error { return n.removeHostPaths(absent) }})
	return nil
}

// hostDirs are the host-wide directories a node may create, parents first.
// The runc shim makes its socket directory (shimSocketDir) whatever
// containerd's state directory: on a machine where no containerd ran
// before, the first node creates it.
var hostDirs = []string{"/var/lib/kubelet", devicePluginDir, containerLogsDir, cniCacheDir, cniCacheDir + "/results", filepath.Dir(shimSocketDir), shimSocketDir}

// removeHostPaths removes the kubelet's device-plugin socket and the log
// links into the node directory, then those of dirs that are empty now
// (deepest first, as listed by hostPaths).
func (n *Node) removeHostPaths(dirs []string) error {
	err := os.Remove(filepath.Join(devicePluginDir, "kubelet.sock"))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	err = errors.Join(err, n.removeLogLinks())
	// libcni's cached results of the node's network ("dranode-node-<id>-eth0").
	results, _ := filepath.Glob(filepath.Join(cniCacheDir, "results", cniNetwork+"-*"))
	for _, r := range results {
		err = errors.Join(err, os.Remove(r))
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if rmErr := os.Remove(dirs[i]); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) && !errors.Is(rmErr, syscall.ENOTEMPTY) && !errors.Is(rmErr, syscall.EEXIST) {
			err = errors.Join(err, rmErr)
		}
	}
	return err
}

func (n *Node) removeLogLinks() error {
	ents, err := os.ReadDir(containerLogsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		p := filepath.Join(containerLogsDir, e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, n.dir+"/") {
			errs = append(errs, os.Remove(p))
		}
	}
	return errors.Join(errs...)
}

// cgroupName is the kubelet's cgroupRoot.
func (n *Node) cgroupName() string { return filepath.Base(n.dir) }

// cgroupDirs is the node's cgroup in every mounted hierarchy (v1
// controllers, the named systemd one, the unified v2 one of a hybrid or a
// pure v2 host).
func (n *Node) cgroupDirs() ([]string, error) {
	mounts, err := readMountinfo()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, m := range mounts {
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			dirs = append(dirs, filepath.Join(m.point, n.cgroupName()))
		}
	}
	if len(dirs) == 0 {
		return nil, errors.New("harness: no cgroup hierarchy is mounted")
	}
	return dirs, nil
}

// cgroupV1 says whether /sys/fs/cgroup is a v1 (or hybrid) layout, where
// the v1.37 kubelet needs failCgroupV1: false.
func cgroupV1() (bool, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/sys/fs/cgroup", &st); err != nil {
		return false, err
	}
	const cgroup2Magic = 0x63677270
	return st.Type != cgroup2Magic, nil
}

// makeCgroup creates the cgroupRoot the kubelet is given, which it requires
// to exist; the pods' cgroups are made below it.
func (n *Node) makeCgroup() error {
	dirs, err := n.cgroupDirs()
	if err != nil {
		return err
	}
	n.undo = append(n.undo, cleanupStep{"cgroup " + n.cgroupName(), func() error { return removeCgroups(dirs) }})
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("harness: cgroup: %w", err)
		}
		// A new v1 cpuset has no CPUs or memory nodes; copy the parent's.
		if strings.HasSuffix(filepath.Dir(d), "/cpuset") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return fmt.Errorf("harness: cgroup %s: %w", f, err)
				}
			}
		}
	}
	return nil
}

// removeCgroups kills every process left in the trees (containers the
// runtime did not stop) and removes the cgroups, deepest first.
func removeCgroups(roots []string) error {
	var errs []error
	for _, root := range roots {
		if _, err := os.Stat(root); errors.Is(err, os.ErrNotExist) {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs)
		for attempt := 0; ; attempt++ {
			var left []string
			for _, d := range dirs {
				killCgroupProcs(d)
				if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
					left = append(left, d)
				}
			}
			if len(left) == 0 {
				break
			}
			if attempt == 50 {
				errs = append(errs, fmt.Errorf("cgroups not removed: %s", strings.Join(left, ", ")))
				break
			}
			dirs = left
			time.Sleep(100 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

func killCgroupProcs(dir string) {
	raw, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(raw)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// bridgeName is the node's Linux bridge: the CNI network's (for pods that
// are not on the host network) and the holder of the node's InternalIP.
func (n *Node) bridgeName() string { return "drnode0" }

func (n *Node) makeBridge() error {
	if ip := net.ParseIP(n.nodeIP); ip == nil || !ip.IsPrivate() {
		return fmt.Errorf("harness: subnet %q must be a private a.b.c prefix", n.opts.Subnet)
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && strings.HasPrefix(ipn.IP.String(), n.opts.Subnet+".") {
			return fmt.Errorf("harness: subnet %s.0/24 is already in use on this machine (%s); choose Options.Subnet", n.opts.Subnet, ipn)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	br := n.bridgeName()
	if err := run(ctx, "ip", "link", "add", br, "type", "bridge"); err != nil {
		return fmt.Errorf("harness: bridge: %w", err)
	}
	n.undo = append(n.undo, cleanupStep{"bridge " + br, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return run(ctx, "ip", "link", "del", br)
	}})
	if err := run(ctx, "ip", "addr", "add", n.nodeIP+"/24", "dev", br); err != nil {
		return fmt.Errorf("harness: bridge: %w", err)
	}
	return run(ctx, "ip", "link", "set", br, "up")
}

type mount struct{ point, fstype string }

func readMountinfo() ([]mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ms []mount
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		// id parent major:minor root point options [optional...] - fstype source super
		fields := strings.Fields(s.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		ms = append(ms, mount{point: unescapeMount(fields[4]), fstype: fields[sep+1]})
	}
	return ms, s.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll detaches every mount under the node directory, deepest first:
// the kubelet's own bind mount of its root, pod volumes, sandbox /dev/shm,
// container root filesystems.
func (n *Node) unmountAll() error {
	var errs []error
	for attempt := 0; attempt < 5; attempt++ {
		mounts, err := readMountinfo()
		if err != nil {
			return err
		}
		var under []string
		for _, m := range mounts {
			if m.point == n.dir || strings.HasPrefix(m.point, n.dir+"/") {
				under = append(under, m.point)
			}
		}
		if len(under) == 0 {
			return nil
		}
		slices.SortFunc(under, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
		errs = errs[:0]
		for _, p := range under {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}
