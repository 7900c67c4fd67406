package agent

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoTypedClientInTheAgent: the agent's binary links no typed client-go
// package. Each of them imports k8s.io/client-go/kubernetes/scheme, whose
// init registers every API group's types and kept 9.4 MiB more of the
// agent resident (BENCHMARKS.md, "Memory"); one stray import would bring
// that back without any test failing otherwise.
func TestNoTypedClientInTheAgent(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./cmd/dranode-agent").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "k8s.io/client-go/kubernetes" || strings.HasPrefix(pkg, "k8s.io/client-go/kubernetes/") {
			t.Errorf("dranode-agent links %s: build API clients with the agent's own scheme (apiclient.go)", pkg)
		}
	}
}
