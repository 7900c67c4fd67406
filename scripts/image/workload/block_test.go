package workload_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dranode/dranode/scripts/image/workload"
)

// The probe on a regular file stands in for a device here; that a device
// cgroup refuses the open is shown on a real node (compat/node).
func TestProbeBlock(t *testing.T) {
	dir := t.TempDir()
	dev := filepath.Join(dir, "disk-3")
	if err := os.WriteFile(dev, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	first := workload.ProbeBlock(filepath.Join(dir, "disk-*"), "pattern-1")
	if first.Path != dev || first.OpenError != "" || first.Error != "" || !first.ZerosBefore || first.ReadBack != "pattern-1" {
		t.Fatalf("first probe = %+v", first)
	}
	second := workload.ProbeBlock(dev, "")
	if second.ZerosBefore || second.ReadBack != "" {
		t.Fatalf("second probe saw no data: %+v", second)
	}
	missing := workload.ProbeBlock(filepath.Join(dir, "nope"), "x")
	if !strings.Contains(missing.OpenError, "no such file") {
		t.Fatalf("probe of a missing device = %+v", missing)
	}
}
