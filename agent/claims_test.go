package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// The sample claims of examples/config decode strictly and are allocated to
// the standalone node, dranode-dev (config's TestExampleConfigsLoad loads
// the sample configurations).
func TestSampleClaimsForTheStandaloneNode(t *testing.T) {
	for _, f := range []string{"gpu-claim.yaml", "loop-claim.yaml"} {
		c, err := ReadClaimFile("../examples/config/claims/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if c.Status.Allocation == nil || !selectsNode(c.Status.Allocation, "dranode-dev") {
			t.Errorf("sample claim %s not allocated to dranode-dev: %+v", f, c.Status)
		}
	}
}

// FuzzReadClaimFile: decoding never panics, and a claim it accepts has a
// namespace.
func FuzzReadClaimFile(f *testing.F) {
	if data, err := os.ReadFile("../examples/config/claims/gpu-claim.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte("kind: ResourceClaim\nmetadata: {name: x}\n"))
	f.Add([]byte("kind: Pod\n"))
	f.Add([]byte("{\"metadata\": {\"name\": \"x\", \"uid\": 3}}"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "claim.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := ReadClaimFile(path)
		if err == nil && c.Namespace == "" {
			t.Fatal("accepted claim without a namespace")
		}
	})
}
