package harness

import (
	"os"
	"path/filepath"
	"testing"
)

func TestOthersMount(t *testing.T) {
	tmp := filepath.Clean(os.TempDir())
	for _, tc := range []struct {
		point string
		want  bool
	}{
		{filepath.Join(tmp, "powerloss-123/mnt"), true},
		{filepath.Join(tmp, "TestCollect42/001/dev"), true},
		{filepath.Join(tmp, nodeDirPrefix+"123/kubelet/pods/x/volumes"), false},
		{filepath.Join(tmp, nodeDirPrefix+"123"), false},
		{tmp, false},
		{"/var/lib/kubelet/pods/x", false},
		{"/run/netns/cni-1", false},
	} {
		if got := othersMount(tc.point); got != tc.want {
			t.Errorf("othersMount(%q) = %v, want %v", tc.point, got, tc.want)
		}
	}
}
