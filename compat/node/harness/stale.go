package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// SweepStale removes what a node whose test binary died without Stop (a
// SIGKILL, a -timeout, a machine restarted under it) left behind. Start
// calls it; a test that compares the host before and after a node calls it
// first, so that the comparison starts from a host with no dead node on it.
// The caller holds the host lock (tools/envtest/hostlock), which the dead
// node released by dying, so every node directory found is stale:
// its kubelet and containerd died with the test binary (Pdeathsig), but its
// shims, containers, mounts, cgroups and bridge are still there, and the
// bridge would make this Start fail.
func SweepStale(log io.Writer) error {
	dirs, err := filepath.Glob(filepath.Join(nodeDirRoot, nodeDirPrefix+"*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "containerd.toml")); err != nil {
			continue // not a node directory
		}
		fmt.Fprintf(log, "node: removing what a dead node left in %s\n", d)
		stale := &Node{dir: d}
		errs = append(errs, stale.killShims())
		if cg, err := stale.cgroupDirs(); err == nil {
			errs = append(errs, removeCgroups(cg))
		}
		// Whether the kubelet's host-wide directories existed before the
		// dead node is unknown: they go only if empty.
		errs = append(errs, stale.unmountAll(), stale.removeHostPaths(hostDirs), os.RemoveAll(d))
	}
	stale := &Node{}
	if exec.Command("ip", "link", "show", stale.bridgeName()).Run() == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		errs = append(errs, run(ctx, "ip", "link", "del", stale.bridgeName()))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("harness: cleaning up after a dead node: %w", err)
	}
	return nil
}
