package images_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dranode/dranode/scripts/image/images"
	"github.com/dranode/dranode/scripts/image/internal/containerdtest"
	"github.com/dranode/dranode/scripts/image/workload"
)

// TestArchiveImportsIntoContainerd imports the archive of every image into a
// real containerd's k8s.io namespace, as a node does, and wants each listed
// under its name; then runs the pause and workload images with runc, the
// way the kubelet's containers will.
func TestArchiveImportsIntoContainerd(t *testing.T) {
	layouts := built(t)
	c := containerdtest.Start(t, repoRoot(t))
	dir := t.TempDir()
	for _, n := range images.Names() {
		l := layouts[n]
		tarFile := filepath.Join(dir, n+".tar")
		if err := images.ArchiveFile(l.Dir, tarFile); err != nil {
			t.Fatal(err)
		}
		// The archive is as reproducible as the layout.
		var again bytes.Buffer
		if err := images.Archive(l.Dir, &again); err != nil {
			t.Fatal(err)
		}
		if first, _ := os.ReadFile(tarFile); !bytes.Equal(first, again.Bytes()) {
			t.Errorf("%s: two archives of one layout differ", n)
		}
		c.Ctr(t, "-n", "k8s.io", "images", "import", tarFile)
	}
	listed := c.Ctr(t, "-n", "k8s.io", "images", "ls")
	for _, n := range images.Names() {
		l := layouts[n]
		if !strings.Contains(listed, l.Ref+" ") || !strings.Contains(listed, l.Digest) {
			t.Errorf("%s (%s) not listed by ctr images ls:\n%s", l.Ref, l.Digest, listed)
		}
	}

	t.Run("pause", func(t *testing.T) {
		out := runUntil(t, c, layouts[images.Pause].Ref, "pause-1", nil, func(out string) bool {
			return strings.Contains(out, "pause: waiting")
		})
		if !strings.Contains(out, "pause: terminated, exiting") {
			t.Errorf("pause output %q", out)
		}
	})
	t.Run("workload", func(t *testing.T) {
		var r workload.Report
		runUntil(t, c, layouts[images.Workload].Ref, "workload-1", []string{"--env", "DRANODE_TEST=given"}, func(out string) bool {
			var err error
			r, err = workload.Parse([]byte(out))
			return err == nil
		})
		if v, ok := r.Getenv("DRANODE_TEST"); !ok || v != "given" {
			t.Errorf("DRANODE_TEST = %q, %v; env %v", v, ok, r.Env)
		}
		if d, ok := r.Device("/dev/null"); !ok || d.Type != workload.CharDevice || d.Major != 1 || d.Minor != 3 {
			t.Errorf("/dev/null = %+v, %v; devices %v", d, ok, r.Devices)
		}
		if m, ok := r.MountAt("/proc"); !ok || m.FSType != "proc" {
			t.Errorf("/proc = %+v, %v; mounts %v", m, ok, r.Mounts)
		}
		if _, ok := r.MountAt("/"); !ok {
			t.Errorf("no root mount in %v", r.Mounts)
		}
	})
}

// runUntil runs image as container id with "ctr run --rm", waits until its
// output satisfies ready, sends SIGTERM and wants exit status 0. It
// returns the output.
func runUntil(t *testing.T, c *containerdtest.Containerd, ref, id string, flags []string, ready func(string) bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out lockedBuffer
	args := append(append([]string{"-n", "k8s.io", "run", "--rm", "--runc-root", c.RuncRoot}, flags...), ref, id)
	cmd := c.Command(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for !(ready(out.String()) && strings.Contains(c.Ctr(t, "-n", "k8s.io", "tasks", "ls"), "RUNNING")) {
		select {
		case err := <-done:
			t.Fatalf("ctr run ended before the container was ready: %v\n%s", err, out.String())
		case <-ctx.Done():
			t.Fatalf("container not ready: %v\n%s", ctx.Err(), out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	c.Ctr(t, "-n", "k8s.io", "tasks", "kill", "--signal", "SIGTERM", id)
	if err := <-done; err != nil {
		t.Fatalf("ctr run after SIGTERM: %v (want exit status 0)\n%s", err, out.String())
	}
	return out.String()
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
