// Package containerdtest runs a real containerd for tests: the binaries
// scripts/build-node.sh builds and caches, with root, state, socket and
// configuration in the test's temporary directory, stopped when the test
// ends. Only what image import and a plain "ctr run" need is enabled (no
// CRI, no NRI, no tracing).
package containerdtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dranode/dranode/tools/envtest/hostlock"
)

// Containerd is a running containerd.
type Containerd struct {
	// Socket is the gRPC address ("ctr -a").
	Socket string
	// RuncRoot is runc's state directory for this containerd's containers;
	// pass it to "ctr run --runc-root". runc's default,
	// /run/containerd/runc, is shared by every containerd on the host.
	RuncRoot string
	// Env is node.env from the node build: CONTAINERD, CTR, RUNC, ...
	Env map[string]string
	dir string
	log *bytes.Buffer
}

// NodeEnv runs root/scripts/build-node.sh (which returns at once when its
// cache is complete) and reads the node.env it points to.
func NodeEnv(t testing.TB, root string) map[string]string {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "scripts", "build-node.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/build-node.sh: %v\n%s", err, stderr.String())
	}
	dir := strings.TrimSpace(string(out))
	b, err := os.ReadFile(filepath.Join(dir, "node.env"))
	if err != nil {
		t.Fatalf("node build: %v", err)
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	for _, k := range []string{"CONTAINERD", "CTR", "CONTAINERD_SHIM_RUNC_V2"} {
		if env[k] == "" {
			t.Fatalf("%s/node.env has no %s", dir, k)
		}
	}
	return env
}

// Start starts containerd and waits until it answers; it is stopped (and
// its log printed if the test failed) when the test ends.
func Start(t testing.TB, root string) *Containerd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("containerd needs root")
	}
	// Its shims put their sockets in the host's /run/containerd/s whatever
	// the configured state directory, and its containers' cgroups are the
	// host's: a real node's test (compat/node) must not see them appear.
	release, err := hostlock.Hold(context.Background(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	removeCreatedDirs(t, "/run/containerd", shimSocketDir, "/run/containerd/fifo")
	c := &Containerd{Env: NodeEnv(t, root), dir: t.TempDir(), log: &bytes.Buffer{}}
	c.Socket = filepath.Join(c.dir, "containerd.sock")
	c.RuncRoot = filepath.Join(c.dir, "runc")
	config := fmt.Sprintf(`version = 3
root = %q
state = %q
disabled_plugins = [
  "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images",
  "io.containerd.podsandbox.controller.v1.podsandbox",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.nri.v1.nri",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
]

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  address = ""

[metrics]
  address = ""
`, filepath.Join(c.dir, "root"), filepath.Join(c.dir, "state"), c.Socket, c.Socket+".ttrpc")
	cfgFile := filepath.Join(c.dir, "config.toml")
	if err := os.WriteFile(cfgFile, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(c.Env["CONTAINERD"], "--config", cfgFile)
	cmd.Stdout, cmd.Stderr = c.log, c.log
	cmd.Env = c.environ()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		// Shims and their containers outlive containerd by design: end
		// them first, then containerd, then whatever is still mounted.
		c.removeTasks(t)
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		unmountUnder(t, c.dir)
		if t.Failed() {
			t.Logf("containerd log:\n%s", c.log.String())
		}
	})
	// Ready when ctr gets an answer; a containerd that exits early fails
	// the test with its log.
	deadline := time.After(time.Minute)
	for {
		if _, err := c.ctrOut(context.Background(), "version"); err == nil {
			return c
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("containerd exited: %v\n%s", err, c.log.String())
		case <-deadline:
			t.Fatalf("containerd did not answer on %s within a minute:\n%s", c.Socket, c.log.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// shimSocketDir is where the runc shim puts its socket whatever
// containerd's state directory (containerd's pkg/shim).
const shimSocketDir = "/run/containerd/s"

// removeCreatedDirs removes, when the test ends (after containerd and its
// shims, whose cleanup is registered later), those of dirs (parents first)
// that did not exist now and are empty then: on a machine where no
// containerd ran before, the first shim creates its socket directory and
// ctr its FIFO directory, and the host is to be left as found.
func removeCreatedDirs(t testing.TB, dirs ...string) {
	var absent []string
	for _, d := range dirs {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			absent = append(absent, d)
		}
	}
	t.Cleanup(func() {
		for i := len(absent) - 1; i >= 0; i-- {
			if err := os.Remove(absent[i]); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
				t.Errorf("removing %s, which the test's containerd created: %v", absent[i], err)
			}
		}
	})
}

// Command returns an exec.Cmd of ctr against this containerd, for a caller
// that needs to run it in the background.
func (c *Containerd) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.Env["CTR"], append([]string{"-a", c.Socket}, args...)...)
	cmd.Env = c.environ()
	return cmd
}

// environ puts the runc shim on PATH, where containerd looks for it.
func (c *Containerd) environ() []string {
	return append(os.Environ(), "PATH="+filepath.Dir(c.Env["CONTAINERD_SHIM_RUNC_V2"])+":"+os.Getenv("PATH"))
}

// Ctr runs ctr against this containerd with args and returns its standard
// output; it fails the test on error.
func (c *Containerd) Ctr(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := c.ctrOut(ctx, args...)
	if err != nil {
		t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (c *Containerd) ctrOut(ctx context.Context, args ...string) (string, error) {
	// Standard output only: ctr warns on standard error (cgroup v1's
	// deprecation, for one), which would spoil a list of IDs.
	cmd := c.Command(ctx, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// removeTasks kills and deletes every task and container of every
// namespace.
func (c *Containerd) removeTasks(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nss, err := c.ctrOut(ctx, "namespaces", "ls", "-q")
	if err != nil {
		t.Errorf("ctr namespaces ls: %v\n%s", err, nss)
		return
	}
	for _, ns := range strings.Fields(nss) {
		ids, err := c.ctrOut(ctx, "-n", ns, "containers", "ls", "-q")
		if err != nil {
			t.Errorf("ctr containers ls: %v\n%s", err, ids)
			continue
		}
		for _, id := range strings.Fields(ids) {
			// A container without a task answers "not found": fine.
			c.ctrOut(ctx, "-n", ns, "tasks", "delete", "--force", id)
			if out, err := c.ctrOut(ctx, "-n", ns, "containers", "delete", id); err != nil {
				t.Errorf("ctr containers delete %s: %v\n%s", id, err, out)
			}
		}
	}
}

// unmountUnder detaches every mount below dir, deepest first, so that the
// test's temporary directory can be removed.
func unmountUnder(t testing.TB, dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		if err := syscall.Unmount(points[i], syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", points[i], err)
		}
	}
}
