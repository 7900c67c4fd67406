package harness

import (
	"os"
	"path/filepath"
	"testing"
)

// MarkUnhealthy writes the mark the simulated GPU drivers look for next to
// each device node and removes them all again; a device it cannot mark
// leaves no mark of the others behind. EmptyDir empties without removing.
func TestMarkUnhealthyAndEmptyDir(t *testing.T) {
	dir := t.TempDir()
	unmark, err := MarkUnhealthy(SimulatedGPU{Dir: dir, Device: "gpu-0"}, SimulatedGPU{Dir: dir, Device: "gpu-12"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gpu0.unhealthy", "gpu12.unhealthy"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("mark %s: %v", name, err)
		}
	}
	if err := unmark(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("marks left after unmark: %v", entries)
	}

	if _, err := MarkUnhealthy(SimulatedGPU{Dir: dir, Device: "gpu-1"}, SimulatedGPU{Dir: filepath.Join(dir, "missing"), Device: "gpu-2"}); err == nil {
		t.Fatal("marking a device in a missing directory succeeded")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a failed MarkUnhealthy left %v", entries)
	}

	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "spec.json"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := EmptyDir(dir); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("after EmptyDir: %v, %v", entries, err)
	}
}
