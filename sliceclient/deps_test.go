package sliceclient

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoTypedClientImported: importing sliceclient must not bring in a
// typed client-go package, whose scheme registers every API group at start
// (see Client); callers choose their client.
func TestNoTypedClientImported(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "k8s.io/client-go/kubernetes" || strings.HasPrefix(pkg, "k8s.io/client-go/kubernetes/") {
			t.Errorf("sliceclient imports %s", pkg)
		}
	}
}
