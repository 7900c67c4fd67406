package agent

import (
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dranode/dranode/pluginmgr"
)

// A plugin that says which share each answer is for is paired by it, in
// whatever order it answers; one that does not is paired in order.
func TestBuildSpecPairsSharesByShareID(t *testing.T) {
	share := func(s string) *types.UID { u := types.UID(s); return &u }
	results := []resourcev1.DeviceRequestAllocationResult{
		{Request: "r", Driver: "gpu.example.com", Pool: "p", Device: "gpu-0", ShareID: share("s1")},
		{Request: "r", Driver: "gpu.example.com", Pool: "p", Device: "gpu-0", ShareID: share("s2")},
	}
	tests := []struct {
		name     string
		prepared []pluginmgr.PreparedDevice
		want     []string // share ID of each recorded device, in answer order
	}{
		{"by share ID, reversed", []pluginmgr.PreparedDevice{
			{Pool: "p", Device: "gpu-0", Requests: []string{"r"}, ShareID: "s2", Edits: pluginmgr.ContainerEdits{Env: []string{"SHARE=s2"}}},
			{Pool: "p", Device: "gpu-0", Requests: []string{"r"}, ShareID: "s1", Edits: pluginmgr.ContainerEdits{Env: []string{"SHARE=s1"}}},
		}, []string{"s2", "s1"}},
		{"in order, without share IDs", []pluginmgr.PreparedDevice{
			{Pool: "p", Device: "gpu-0", Requests: []string{"r"}, Edits: pluginmgr.ContainerEdits{Env: []string{"SHARE=s1"}}},
			{Pool: "p", Device: "gpu-0", Requests: []string{"r"}, Edits: pluginmgr.ContainerEdits{Env: []string{"SHARE=s2"}}},
		}, []string{"s1", "s2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, devs, err := buildSpec("gpu.example.com", "uid", tt.prepared, results)
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range tt.want {
				if devs[i].ShareID != want {
					t.Errorf("device %d recorded with share %q, want %q", i, devs[i].ShareID, want)
				}
				if name, env := spec.Devices[i].Name, spec.Devices[i].ContainerEdits.Env[0]; name != "uid-gpu-0-"+want || env != "SHARE="+want {
					t.Errorf("CDI device %d is %s with %s, want uid-gpu-0-%s with SHARE=%s", i, name, env, want, want)
				}
			}
		})
	}
}
