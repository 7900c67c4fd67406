package kubeletcompat

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCorePackageIsStandardLibraryOnly holds the line this subpackage exists
// for: go-spew (and whatever else the kubelet's formats need) may come in
// here, never into the core checkpoint package (nor into the internal
// packages it uses).
func TestCorePackageIsStandardLibraryOnly(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("needs the go tool: %v", err)
	}
	const core = "github.com/dranode/dranode/checkpoint"
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", core).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var outside []string
	for _, pkg := range strings.Fields(string(out)) {
		// The module's own internal packages and durable are part of the
		// core; go list -deps covers their imports too.
		if pkg != core && pkg != core+"/durable" && !strings.HasPrefix(pkg, core+"/internal/") {
			outside = append(outside, pkg)
		}
	}
	if len(outside) > 0 {
		t.Errorf("%s imports packages outside the standard library: %v", core, outside)
	}
	// The check itself must be able to see a non-standard dependency.
	out, err = exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", core+"/kubeletcompat").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "github.com/davecgh/go-spew/spew") {
		t.Errorf("go list does not report go-spew under kubeletcompat (%v):\n%s", err, out)
	}
}
