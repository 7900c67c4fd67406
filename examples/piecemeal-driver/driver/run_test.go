package driver

import (
	"errors"
	"testing"
)

// Run itself, against a real kube-apiserver and over the kubelet's gRPC
// API, is tested in the integration module (integration/piecemeal), so
// that this module does not require the test control plane.

func TestRunRejectsMissingOptions(t *testing.T) {
	err := Run(t.Context(), Options{Config: testConfig(t)})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Run without client and directories: %v; want ErrInvalidConfig", err)
	}
}
