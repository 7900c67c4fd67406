package kubelet

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	dmcheckpoint "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
	drastate "k8s.io/kubernetes/pkg/kubelet/cm/dra/state"
)

// The scenarios below are the contents of the golden files. Everything in
// them is fixed (no clocks, no random UIDs), so the kubelet produces the same
// bytes on every run; maps are sorted by encoding/json.

type draScenario struct {
	name string
	// claims is stored with the DRA checkpointer; nil means the file is the
	// one the kubelet creates on its first start (GetOrCreate).
	claims drastate.ClaimInfoStateList
}

func shareID(s string) *types.UID { u := types.UID(s); return &u }

func draScenarios() []draScenario {
	return []draScenario{
		{name: "empty"},
		{name: "one-claim", claims: drastate.ClaimInfoStateList{{
			ClaimUID:  "0b7c3d2e-6f4a-4c1b-9a8e-1d2c3b4a5f60",
			ClaimName: "gpu-claim",
			Namespace: "default",
			PodUIDs:   sets.New("5e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b"),
			DriverState: map[string]drastate.DriverState{
				"gpu.example.com": {Devices: []drastate.Device{{
					PoolName:     "node-a",
					DeviceName:   "gpu-0",
					RequestNames: []string{"gpu"},
					CDIDeviceIDs: []string{"example.com/gpu=claim-0b7c3d2e-gpu-0"},
				}}},
			},
		}}},
		{name: "several-claims", claims: drastate.ClaimInfoStateList{
			{
				ClaimUID:  "11111111-2222-4333-8444-555555555555",
				ClaimName: "training-job-gpus",
				Namespace: "ml",
				PodUIDs:   sets.New("aaaaaaaa-0000-4000-8000-000000000001", "aaaaaaaa-0000-4000-8000-000000000002"),
				DriverState: map[string]drastate.DriverState{
					"gpu.example.com": {Devices: []drastate.Device{
						{PoolName: "node-a", DeviceName: "gpu-0", RequestNames: []string{"gpus"},
							CDIDeviceIDs: []string{"example.com/gpu=claim-11111111-gpu-0", "example.com/gpu=common"}},
						{PoolName: "node-a", DeviceName: "gpu-1", RequestNames: []string{"gpus"},
							CDIDeviceIDs: []string{"example.com/gpu=claim-11111111-gpu-1", "example.com/gpu=common"}},
					}},
					"nic.example.com": {Devices: []drastate.Device{
						{PoolName: "node-a-nics", DeviceName: "vf-3", ShareID: shareID("c0ffee00-1111-4222-8333-444455556666"),
							RequestNames: []string{"rdma", "net"},
							CDIDeviceIDs: []string{"example.com/nic=vf-3"}},
					}},
				},
			},
			{
				ClaimUID:  "66666666-7777-4888-9999-000000000000",
				ClaimName: "shared-fpga",
				Namespace: "video",
				PodUIDs:   sets.New("bbbbbbbb-0000-4000-8000-000000000001"),
				DriverState: map[string]drastate.DriverState{
					"fpga.example.com": {
						Devices: []drastate.Device{
							{PoolName: "fpga-pool", DeviceName: "fpga-7", RequestNames: []string{"accel"}},
						},
						SkipNodeOperations: []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationNodePrepareResources},
					},
				},
			},
			{
				ClaimUID:  "99999999-8888-4777-a666-555555555555",
				ClaimName: "pod-0-tpu-xyz12",
				Namespace: "default",
				PodUIDs:   sets.New("cccccccc-0000-4000-8000-000000000003"),
				DriverState: map[string]drastate.DriverState{
					"tpu.example.com": {Devices: []drastate.Device{
						{PoolName: "slice-1", DeviceName: "tpu-0", RequestNames: []string{"tpu"},
							CDIDeviceIDs: []string{"example.com/tpu=tpu-0"}},
						{PoolName: "slice-1", DeviceName: "tpu-1", RequestNames: []string{"tpu"},
							CDIDeviceIDs: []string{"example.com/tpu=tpu-1"}},
					}},
				},
			},
		}},
	}
}

type deviceManagerScenario struct {
	name string
	// pre120 selects the layout written before Kubernetes 1.20, written by
	// the v1.30 kubelet's v1 writer under testdata/v1writer.
	pre120     bool
	entries    []dmcheckpoint.PodDevicesEntry
	registered map[string][]string
}

// allocResp serializes a ContainerAllocateResponse the way the device
// manager stores it. Deterministic marshalling only fixes the order of the
// Envs map, so that the golden bytes do not change from run to run.
func allocResp(t testing.TB, devs ...string) []byte {
	t.Helper()
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}, Annotations: map[string]string{"example.com/owner": "golden"}}
	for i, d := range devs {
		resp.Envs[fmt.Sprintf("EXAMPLE_DEVICE_%d", i)] = d
		resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/" + d, HostPath: "/dev/" + d, Permissions: "rw"})
	}
	resp.Mounts = []*pluginapi.Mount{{ContainerPath: "/usr/lib/example", HostPath: "/opt/example/lib", ReadOnly: true}}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
	if err != nil {
		t.Fatalf("marshal ContainerAllocateResponse: %v", err)
	}
	return b
}

func deviceManagerScenarios(t testing.TB) []deviceManagerScenario {
	several := []dmcheckpoint.PodDevicesEntry{
		{PodUID: "d0000000-0000-4000-8000-000000000001", ContainerName: "trainer", ResourceName: "example.com/gpu",
			DeviceIDs: dmcheckpoint.DevicesPerNUMA{0: {"gpu-0", "gpu-1"}, 1: {"gpu-4"}}, AllocResp: allocResp(t, "gpu-0", "gpu-1", "gpu-4")},
		{PodUID: "d0000000-0000-4000-8000-000000000001", ContainerName: "trainer", ResourceName: "example.com/nic",
			DeviceIDs: dmcheckpoint.DevicesPerNUMA{1: {"nic-vf-2"}}, AllocResp: allocResp(t, "nic-vf-2")},
		{PodUID: "d0000000-0000-4000-8000-000000000001", ContainerName: "sidecar", ResourceName: "example.com/nic",
			DeviceIDs: dmcheckpoint.DevicesPerNUMA{0: {"nic-vf-0"}}, AllocResp: allocResp(t, "nic-vf-0")},
		{PodUID: "d0000000-0000-4000-8000-000000000002", ContainerName: "app", ResourceName: "example.com/gpu",
			DeviceIDs: dmcheckpoint.DevicesPerNUMA{1: {"gpu-5", "gpu-6"}}, AllocResp: allocResp(t, "gpu-5", "gpu-6")},
		{PodUID: "d0000000-0000-4000-8000-000000000003", ContainerName: "init-firmware", ResourceName: "example.com/fpga",
			DeviceIDs: dmcheckpoint.DevicesPerNUMA{0: {"fpga-0"}, 1: {"fpga-1"}, 3: {"fpga-3"}}, AllocResp: allocResp(t, "fpga-0", "fpga-1", "fpga-3")},
	}
	registered := map[string][]string{
		"example.com/gpu":  {"gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7"},
		"example.com/nic":  {"nic-vf-0", "nic-vf-1", "nic-vf-2"},
		"example.com/fpga": {"fpga-0", "fpga-1", "fpga-3"},
	}
	return []deviceManagerScenario{
		{name: "per-numa-empty", registered: map[string][]string{}},
		{name: "per-numa-several", entries: several, registered: registered},
		{name: "pre-1.20-empty", pre120: true, registered: map[string][]string{}},
		{name: "pre-1.20-several", pre120: true, entries: several, registered: registered},
	}
}
