package chart

import (
	"strings"
	"testing"
)

// TestChartInstallsOnSupportedMinorsOnly: the chart's kubeVersion claims
// exactly the minors the version matrix passes (COMPATIBILITY.md): helm
// renders it for 1.34 to 1.37, pre-releases included, and refuses 1.33 and
// 1.38, naming the constraint.
func TestChartInstallsOnSupportedMinorsOnly(t *testing.T) {
	for _, tc := range []struct {
		version string
		ok      bool
	}{
		{"1.33.9", false},
		{"1.34.0-rc.1", true},
		{"1.34.4", true},
		{"1.35.4", true},
		{"1.36.3", true},
		{"1.37.2", true},
		{"1.38.0-alpha.1", false},
		{"1.38.0", false},
	} {
		_, err := helmTemplate(t, tc.version, "", "--show-only", "templates/daemonset.yaml")
		switch {
		case tc.ok && err != nil:
			t.Errorf("Kubernetes %s: %v", tc.version, err)
		case !tc.ok && err == nil:
			t.Errorf("Kubernetes %s: the chart rendered, want it refused", tc.version)
		case !tc.ok && !strings.Contains(err.Error(), "kubeVersion"):
			t.Errorf("Kubernetes %s: refused without naming kubeVersion: %v", tc.version, err)
		}
	}
}
