package harness_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/dranode/dranode/compat/e2e/harness"
)

// ResolveCDI does what a container runtime does with the CDI IDs the
// kubelet hands it: load the spec directory and inject the devices.
func ExampleResolveCDI() {
	dir, _ := os.MkdirTemp("", "cdi-example-")
	defer os.RemoveAll(dir)
	spec := `{"cdiVersion": "0.6.0", "kind": "example.com/gpu",
  "devices": [{"name": "claim-1-gpu-0", "containerEdits": {
    "env": ["GPU=0"],
    "deviceNodes": [{"path": "/dev/gpu0", "type": "c", "major": 1, "minor": 3}]}}]}`
	_ = os.WriteFile(filepath.Join(dir, "example.json"), []byte(spec), 0o644)

	oci, err := harness.ResolveCDI(dir, []string{"example.com/gpu=claim-1-gpu-0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(oci.Process.Env, oci.Linux.Devices[0].Path)

	_, err = harness.ResolveCDI(dir, []string{"example.com/gpu=claim-2-gpu-0"})
	fmt.Println(err)
	// Output:
	// [GPU=0] /dev/gpu0
	// CDI devices do not resolve: [example.com/gpu=claim-2-gpu-0] (unresolvable CDI devices example.com/gpu=claim-2-gpu-0)
}
