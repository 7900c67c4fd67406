package harness

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// HostState is what a node may change on the machine outside its own
// directory: tests take it before Start and after Stop and compare.
type HostState map[string][]string

// SnapshotHost records mount points, network links, iptables chains and
// rules, top-level cgroups, and the host-wide kubelet and containerd paths.
func SnapshotHost() HostState {
	s := HostState{}
	if ms, err := readMountinfo(); err == nil {
		for _, m := range ms {
			if !othersMount(m.point) {
				s["mounts"] = append(s["mounts"], m.point)
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 1 {
				s["links"] = append(s["links"], strings.TrimSuffix(f[1], ":"))
			}
		}
	}
	for _, ipt := range []string{"iptables-save", "ip6tables-save"} {
		if out, err := exec.Command(ipt).Output(); err == nil {
			for _, l := range bytes.Split(out, []byte("\n")) {
				if len(l) > 0 && (l[0] == ':' || l[0] == '-') {
					s[ipt] = append(s[ipt], strings.Fields(string(l))[0]+" "+ruleText(l))
				}
			}
		}
	}
	cg, _ := filepath.Glob("/sys/fs/cgroup/*/*/")
	s["cgroups"] = cg
	for _, d := range []string{"/var/lib/kubelet", devicePluginDir, containerLogsDir, shimSocketDir, "/usr/libexec/kubernetes", "/run/containerd/runc", "/var/lib/cni", "/etc/cni/net.d", "/run/netns"} {
		ents, err := os.ReadDir(d)
		if err != nil {
			s["paths"] = append(s["paths"], d+" (absent)")
			continue
		}
		for _, e := range ents {
			s["paths"] = append(s["paths"], filepath.Join(d, e.Name()))
		}
	}
	for k := range s {
		slices.Sort(s[k])
	}
	return s
}

// othersMount says whether a mount point is in a temporary directory
// (TMPDIR or /tmp) but outside every node directory. Those are left out of
// the snapshot: other packages' tests, which go test and make check run
// beside a node's, mount there without the host lock (compat/powerloss's
// FUSE file systems, scripts/image/workload's bind mount), in make
// check's private TMPDIR or, for programs outside the check, in /tmp; a
// node mounts under /tmp only inside its own directory, which stays
// watched (a dead node's leftovers included).
func othersMount(point string) bool {
	if rel, ok := strings.CutPrefix(point, nodeDirRoot+"/"); ok && strings.HasPrefix(rel, nodeDirPrefix) {
		return false
	}
	for _, tmp := range []string{filepath.Clean(os.TempDir()), nodeDirRoot} {
		if strings.HasPrefix(point, tmp+"/") {
			return true
		}
	}
	return false
}

// ruleText drops iptables-save's packet counters, which change by themselves.
func ruleText(l []byte) string {
	t := string(l)
	if i := strings.LastIndex(t, " ["); i >= 0 && t[0] == ':' {
		t = t[:i]
	}
	return t
}

// Diff lists what differs between two snapshots, as "+x" (added) and "-x".
func (s HostState) Diff(after HostState) []string {
	var d []string
	keys := map[string]bool{}
	for k := range s {
		keys[k] = true
	}
	for k := range after {
		keys[k] = true
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range keys {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, v := range after[k] {
			if !slices.Contains(s[k], v) {
				d = append(d, k+": +"+v)
			}
		}
		for _, v := range s[k] {
			if !slices.Contains(after[k], v) {
				d = append(d, k+": -"+v)
			}
		}
	}
	return d
}
