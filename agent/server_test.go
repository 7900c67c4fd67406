package agent

import (
	"maps"
	"slices"
	"testing"

	"google.golang.org/grpc"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
)

// kubeletHealthService is the health service a kubelet of Kubernetes
// 1.<minor> calls on a DRA plugin that announced services at registration,
// or "" for none, as each version's pkg/kubelet/cm/dra/plugin decides it
// (with ResourceHealthStatus on): before 1.37 the kubelet knows only
// v1alpha1 and calls it without looking at the announcement (v1.34.4,
// v1.35.4, v1.36.3: DRAPlugin.NodeWatchResources); 1.37 calls the first of
// v1 and v1alpha1 the plugin announced (v1.37.2: pickHealthService).
func kubeletHealthService(minor int, announced []string) string {
	if minor < 37 {
		return drahealthv1alpha1.DRAResourceHealthService
	}
	for _, s := range []string{drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService} {
		if slices.Contains(announced, s) {
			return s
		}
	}
	return ""
}

// TestHealthServiceForEveryKubelet: the service each supported kubelet
// calls is one the agent's DRA server serves, and the 1.37 kubelet picks
// v1 from what the agent announces.
func TestHealthServiceForEveryKubelet(t *testing.T) {
	srv := grpc.NewServer()
	registerHealth(srv, &healthService{})
	served := srv.GetServiceInfo()
	announced := (&driver{health: true}).supportedServices()
	for _, tc := range []struct {
		minor int
		want  string
	}{
		{34, drahealthv1alpha1.DRAResourceHealthService},
		{35, drahealthv1alpha1.DRAResourceHealthService},
		{36, drahealthv1alpha1.DRAResourceHealthService},
		{37, drahealthv1.DRAResourceHealthService},
	} {
		got := kubeletHealthService(tc.minor, announced)
		if got != tc.want {
			t.Errorf("kubelet 1.%d calls %q, want %q (announced %q)", tc.minor, got, tc.want, announced)
		}
		if _, ok := served[got]; !ok {
			t.Errorf("kubelet 1.%d calls %q, which the agent does not serve (serves %v)", tc.minor, got, slices.Sorted(maps.Keys(served)))
		}
	}
	if got := (&driver{}).supportedServices(); slices.ContainsFunc(got, func(s string) bool { return slices.Contains(healthServices, s) }) {
		t.Errorf("a driver without health announces %q", got)
	}
}
