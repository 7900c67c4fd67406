package inventory

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestIsDNSLabelAgreesWithValidation: the regexp-free device name check
// accepts exactly what validation.IsDNS1123Label accepts.
func TestIsDNSLabelAgreesWithValidation(t *testing.T) {
	for _, name := range []string{
		"", "a", "0", "-", "a-", "-a", "a-b", "a--b", "gpu-0", "GPU-0", "gpu_0", "gpu.0", "gpu 0", "é",
		strings.Repeat("a", 63), strings.Repeat("a", 64), "a" + strings.Repeat("-", 61) + "b",
	} {
		want := len(validation.IsDNS1123Label(name)) == 0
		if got := isDNSLabel(name); got != want {
			t.Errorf("isDNSLabel(%q) = %v, validation.IsDNS1123Label says valid=%v", name, got, want)
		}
	}
}
