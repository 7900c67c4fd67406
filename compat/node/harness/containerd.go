package harness

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"
)

func (n *Node) containerdSocket() string {
	return filepath.Join(n.dir, "containerd", "containerd.sock")
}

// ContainerdSocket is the CRI endpoint's path.
func (n *Node) ContainerdSocket() string { return n.containerdSocket() }

var containerdConfig = template.Must(template.New("containerd").Parse(`version = 3
root = "{{.Dir}}/containerd/root"
state = "{{.Dir}}/containerd/state"
# NRI would listen on /run/nri; the other snapshotters need what this host lacks.
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs", "io.containerd.differ.v1.erofs"]

[grpc]
  address = "{{.Socket}}"
[ttrpc]
  address = "{{.Socket}}.ttrpc"
[debug]
  address = ""

[plugins.'io.containerd.internal.v1.opt']
  path = "{{.Dir}}/containerd/opt"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = ["{{.Dir}}/cdi"]
  # Pod network namespaces under the node directory, not /var/run/netns.
  netns_mounts_under_state_dir = true
  # True when root lacks CAP_SYS_RESOURCE: runc could not lower
  # oom_score_adj below containerd's own and every sandbox would fail.
  restrict_oom_score_adj = {{.RestrictOOM}}
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{{.Runc}}"
        Root = "{{.Dir}}/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{{.CNIBinDir}}"]
    conf_dir = "{{.Dir}}/cni"
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{{.SandboxImage}}"
`))

// cniNetwork is the name of the node's CNI network.
const cniNetwork = "dranode-node"

// cniConfig is the bridge network for pods that are not on the host
// network: the node's own bridge, a private subnet, no masquerading, so no
// pod traffic is routed off the machine.
var cniConfig = template.Must(template.New("cni").Parse(`{
  "cniVersion": "1.0.0",
  "name": "{{.Network}}",
  "plugins": [{
    "type": "bridge",
    "bridge": "{{.Bridge}}",
    "isGateway": true,
    "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "{{.Subnet}}.0/24", "rangeStart": "{{.Subnet}}.10"}]], "dataDir": "{{.Dir}}/cni-ipam"}
  }]
}
`))

func (n *Node) startContainerd(ctx context.Context) error {
	restrict, err := lacksCapSysResource()
	if err != nil {
		return err
	}
	data := map[string]any{
		"Dir": n.dir, "Socket": n.containerdSocket(), "Runc": n.bins.Runc, "CNIBinDir": n.bins.CNIBinDir,
		"SandboxImage": n.opts.SandboxImage, "RestrictOOM": restrict,
		"Bridge": n.bridgeName(), "Subnet": n.opts.Subnet, "Network": cniNetwork,
	}
	if err := writeTemplate(filepath.Join(n.dir, "containerd.toml"), containerdConfig, data); err != nil {
		return err
	}
	if err := writeTemplate(filepath.Join(n.dir, "cni", "10-dranode-node.conflist"), cniConfig, data); err != nil {
		return err
	}
	// containerd finds the shim on PATH.
	path := "PATH=" + filepath.Dir(n.bins.Shim) + ":" + os.Getenv("PATH")
	p, err := startProcess("containerd", n.bins.Containerd, []string{"--config", filepath.Join(n.dir, "containerd.toml")}, n.dir, []string{path})
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.containerd = p
	n.mu.Unlock()
	deadline := time.Now().Add(n.opts.ReadyTimeout)
	for {
		// Each ctr is a process of its own, costlier than containerd's
		// whole start: ask it only once containerd has made its socket.
		if _, err := os.Stat(n.containerdSocket()); err != nil && time.Now().Before(deadline) {
			select {
			case <-p.Done():
				return fmt.Errorf("harness: containerd exited (%v); log tail:\n%s", p.Err(), n.LogTail("containerd", 30))
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		if err := n.ctr(ctx, "version"); err == nil {
			n.logf("containerd started (pid %d, oom_score_adj restricted: %v)", p.PID(), restrict)
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("harness: containerd not serving within %s: %w; log tail:\n%s", n.opts.ReadyTimeout, err, n.LogTail("containerd", 30))
		}
		select {
		case <-p.Done():
			return fmt.Errorf("harness: containerd exited (%v); log tail:\n%s", p.Err(), n.LogTail("containerd", 30))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (n *Node) ctr(ctx context.Context, args ...string) error {
	return run(ctx, n.bins.Ctr, append([]string{"--address", n.containerdSocket(), "--namespace", "k8s.io"}, args...)...)
}

// importImage imports an OCI archive into the CRI's namespace, unpacked.
func (n *Node) importImage(ctx context.Context, archive string) error {
	if err := n.ctr(ctx, "images", "import", "--local", archive); err != nil {
		return fmt.Errorf("harness: importing image %s: %w", archive, err)
	}
	n.logf("imported %s", filepath.Base(archive))
	return nil
}

// ImportImage imports one more OCI archive while the node runs.
func (n *Node) ImportImage(ctx context.Context, archive string) error {
	return n.importImage(ctx, archive)
}

// stopContainerd kills the containers (what is left in the node's cgroup),
// stops containerd, then the shims it started (they outlive it by design)
// and removes their sockets.
func (n *Node) stopContainerd() error {
	dirs, err := n.cgroupDirs()
	if err == nil {
		for _, d := range dirs {
			_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
				if err == nil && e.IsDir() {
					killCgroupProcs(p)
				}
				return nil
			})
		}
	}
	n.mu.Lock()
	p := n.containerd
	n.containerd = nil
	n.mu.Unlock()
	if p != nil {
		_ = p.Stop(10 * time.Second)
	}
	return n.killShims()
}

func (n *Node) killShims() error {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if !strings.HasSuffix(args[0], "containerd-shim-runc-v2") || flagValue(args, "-address") != n.containerdSocket() {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		// The shim's socket: containerd names it by a hash of the address,
		// namespace and ID (pkg/shim SocketAddress).
		sum := sha256.Sum256([]byte(filepath.Join(n.containerdSocket(), flagValue(args, "-namespace"), flagValue(args, "-id"))))
		sock := filepath.Join(shimSocketDir, fmt.Sprintf("%x", sum))
		if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// lacksCapSysResource reads the effective capabilities of this process.
func lacksCapSysResource() (bool, error) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return false, fmt.Errorf("harness: CapEff %q: %w", v, err)
			}
			const capSysResource = 24
			return caps&(1<<capSysResource) == 0, nil
		}
	}
	return false, errors.New("harness: no CapEff in /proc/self/status")
}

func writeTemplate(path string, t *template.Template, data any) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := t.Execute(f, data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
