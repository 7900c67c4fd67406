package harness

import (
	"path/filepath"
	"testing"
)

func TestOthersMount(t *testing.T) {
	for _, tmpdir := range []string{"/tmp", "/tmp/dc.x1y2z3"} {
		t.Run("TMPDIR="+tmpdir, func(t *testing.T) {
			t.Setenv("TMPDIR", tmpdir)
			for _, tc := range []struct {
				point string
				want  bool
			}{
				{filepath.Join(tmpdir, "powerloss-123/mnt"), true},
				{filepath.Join(tmpdir, "TestCollect42/001/dev"), true},
				{"/tmp/powerloss-456/mnt", true}, // a program outside make check
				{filepath.Join(nodeDirRoot, nodeDirPrefix+"123/kubelet/pods/x/volumes"), false},
				{filepath.Join(nodeDirRoot, nodeDirPrefix+"123"), false},
				{"/tmp", false},
				{"/var/lib/kubelet/pods/x", false},
				{"/run/netns/cni-1", false},
			} {
				if got := othersMount(tc.point); got != tc.want {
					t.Errorf("othersMount(%q) = %v, want %v", tc.point, got, tc.want)
				}
			}
		})
	}
}
