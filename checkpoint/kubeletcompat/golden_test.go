package kubeletcompat

import (
	"bytes"
	"path/filepath"
	"reflect"
	"testing"
)

// The golden files under testdata were written by the kubelet's own code
// (compat/kubelet regenerates them and fails when they drift). The values
// below are what the harness handed to the kubelet.

func goldenDRA(name string) string {
	return filepath.Join("testdata", DRAManagerStateFile, name)
}

func goldenDeviceManager(name string) string {
	return filepath.Join("testdata", DeviceManagerCheckpointFile, name)
}

func TestReadDRAManagerStateGolden(t *testing.T) {
	tests := []struct {
		file string
		want DRAManagerState
	}{
		{file: "empty", want: DRAManagerState{}},
		{file: "one-claim", want: DRAManagerState{Claims: []DRAClaim{{
			UID: "0b7c3d2e-6f4a-4c1b-9a8e-1d2c3b4a5f60", Name: "gpu-claim", Namespace: "default",
			PodUIDs: []string{"5e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b"},
			Drivers: map[string]DRADriverState{"gpu.example.com": {Devices: []DRADevice{{
				PoolName: "node-a", DeviceName: "gpu-0", RequestNames: []string{"gpu"},
				CDIDeviceIDs: []string{"example.com/gpu=claim-0b7c3d2e-gpu-0"},
			}}}},
		}}}},
		{file: "several-claims", want: DRAManagerState{Claims: []DRAClaim{
			{
				UID: "11111111-2222-4333-8444-555555555555", Name: "training-job-gpus", Namespace: "ml",
				PodUIDs: []string{"aaaaaaaa-0000-4000-8000-000000000001", "aaaaaaaa-0000-4000-8000-000000000002"},
				Drivers: map[string]DRADriverState{
					"gpu.example.com": {Devices: []DRADevice{
						{PoolName: "node-a", DeviceName: "gpu-0", RequestNames: []string{"gpus"},
							CDIDeviceIDs: []string{"example.com/gpu=claim-11111111-gpu-0", "example.com/gpu=common"}},
						{PoolName: "node-a", DeviceName: "gpu-1", RequestNames: []string{"gpus"},
							CDIDeviceIDs: []string{"example.com/gpu=claim-11111111-gpu-1", "example.com/gpu=common"}},
					}},
					"nic.example.com": {Devices: []DRADevice{
						{PoolName: "node-a-nics", DeviceName: "vf-3", ShareID: "c0ffee00-1111-4222-8333-444455556666",
							RequestNames: []string{"rdma", "net"}, CDIDeviceIDs: []string{"example.com/nic=vf-3"}},
					}},
				},
			},
			{
				UID: "66666666-7777-4888-9999-000000000000", Name: "shared-fpga", Namespace: "video",
				PodUIDs: []string{"bbbbbbbb-0000-4000-8000-000000000001"},
				Drivers: map[string]DRADriverState{"fpga.example.com": {
					Devices:            []DRADevice{{PoolName: "fpga-pool", DeviceName: "fpga-7", RequestNames: []string{"accel"}}},
					SkipNodeOperations: []string{"NodePrepareResources"},
				}},
			},
			{
				UID: "99999999-8888-4777-a666-555555555555", Name: "pod-0-tpu-xyz12", Namespace: "default",
				PodUIDs: []string{"cccccccc-0000-4000-8000-000000000003"},
				Drivers: map[string]DRADriverState{"tpu.example.com": {Devices: []DRADevice{
					{PoolName: "slice-1", DeviceName: "tpu-0", RequestNames: []string{"tpu"}, CDIDeviceIDs: []string{"example.com/tpu=tpu-0"}},
					{PoolName: "slice-1", DeviceName: "tpu-1", RequestNames: []string{"tpu"}, CDIDeviceIDs: []string{"example.com/tpu=tpu-1"}},
				}}},
			},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := ReadDRAManagerState(goldenDRA(tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestDRAManagerStateClaim(t *testing.T) {
	state, err := ReadDRAManagerState(goldenDRA("several-claims"))
	if err != nil {
		t.Fatal(err)
	}
	claim, ok := state.Claim("66666666-7777-4888-9999-000000000000")
	if !ok || claim.Name != "shared-fpga" {
		t.Errorf("Claim(shared-fpga UID) = %+v, %v", claim, ok)
	}
	if _, ok := state.Claim("not-a-uid"); ok {
		t.Error("Claim found a UID that is not in the file")
	}
}

// severalEntries is the device layout of the "several" scenarios, per NUMA
// node as the current layout records it.
func severalEntries() []PodDevices {
	return []PodDevices{
		{PodUID: "d0000000-0000-4000-8000-000000000001", ContainerName: "trainer", ResourceName: "example.com/gpu",
			DevicesPerNUMA: map[int64][]string{0: {"gpu-0", "gpu-1"}, 1: {"gpu-4"}}},
		{PodUID: "d0000000-0000-4000-8000-000000000001", ContainerName: "trainer", ResourceName: "example.com/nic",
			DevicesPerNUMA: map[int64][]string{1: {"nic-vf-2"}}},
		{PodUID: "d0000000-0000-4000-8000-000000000001", ContainerName: "sidecar", ResourceName: "example.com/nic",
			DevicesPerNUMA: map[int64][]string{0: {"nic-vf-0"}}},
		{PodUID: "d0000000-0000-4000-8000-000000000002", ContainerName: "app", ResourceName: "example.com/gpu",
			DevicesPerNUMA: map[int64][]string{1: {"gpu-5", "gpu-6"}}},
		{PodUID: "d0000000-0000-4000-8000-000000000003", ContainerName: "init-firmware", ResourceName: "example.com/fpga",
			DevicesPerNUMA: map[int64][]string{0: {"fpga-0"}, 1: {"fpga-1"}, 3: {"fpga-3"}}},
	}
}

func severalRegistered() map[string][]string {
	return map[string][]string{
		"example.com/gpu":  {"gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7"},
		"example.com/nic":  {"nic-vf-0", "nic-vf-1", "nic-vf-2"},
		"example.com/fpga": {"fpga-0", "fpga-1", "fpga-3"},
	}
}

// onNodeZero is what a pre-1.20 checkpoint of the same assignments reads as:
// no affinity was recorded, so everything is on NUMA node 0, in list order.
func onNodeZero(entries []PodDevices) []PodDevices {
	out := make([]PodDevices, len(entries))
	for i, e := range entries {
		e.DevicesPerNUMA = map[int64][]string{0: e.DeviceIDs()}
		out[i] = e
	}
	return out
}

func TestReadDeviceManagerCheckpointGolden(t *testing.T) {
	tests := []struct {
		file string
		want DeviceManagerCheckpoint
	}{
		{file: "per-numa-empty", want: DeviceManagerCheckpoint{Format: FormatDevicesPerNUMA, RegisteredDevices: map[string][]string{}}},
		{file: "per-numa-several", want: DeviceManagerCheckpoint{Format: FormatDevicesPerNUMA, Entries: severalEntries(), RegisteredDevices: severalRegistered()}},
		// Without entries the two layouts write the same bytes; it reads as
		// the current one, as the kubelet would.
		{file: "pre-1.20-empty", want: DeviceManagerCheckpoint{Format: FormatDevicesPerNUMA, RegisteredDevices: map[string][]string{}}},
		{file: "pre-1.20-several", want: DeviceManagerCheckpoint{Format: FormatDeviceList, Entries: onNodeZero(severalEntries()), RegisteredDevices: severalRegistered()}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := ReadDeviceManagerCheckpoint(goldenDeviceManager(tt.file))
			if err != nil {
				t.Fatal(err)
			}
			// AllocResp is the device plugin's protobuf answer, kept opaque;
			// check it is the one for this entry's devices, then compare the rest.
			for i := range got.Entries {
				e := &got.Entries[i]
				for _, id := range e.DeviceIDs() {
					if !bytes.Contains(e.AllocResp, []byte("/dev/"+id)) {
						t.Errorf("entry %d: AllocResp does not mention /dev/%s: %q", i, id, e.AllocResp)
					}
				}
				e.AllocResp = nil
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestPodDevicesDeviceIDs(t *testing.T) {
	tests := []struct {
		perNUMA map[int64][]string
		want    []string
	}{
		{perNUMA: nil, want: nil},
		{perNUMA: map[int64][]string{1: {"b"}, 0: {"c", "a"}}, want: []string{"a", "b", "c"}},
		{perNUMA: map[int64][]string{0: {"a"}, 1: {"a"}}, want: []string{"a"}},
	}
	for _, tt := range tests {
		if got := (PodDevices{DevicesPerNUMA: tt.perNUMA}).DeviceIDs(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DeviceIDs(%v) = %v, want %v", tt.perNUMA, got, tt.want)
		}
	}
}

func TestDeviceManagerFormatString(t *testing.T) {
	for f, want := range map[DeviceManagerFormat]string{
		FormatDevicesPerNUMA:   "devices-per-NUMA (1.20+)",
		FormatDeviceList:       "device-list (pre-1.20)",
		DeviceManagerFormat(9): "DeviceManagerFormat(9)",
	} {
		if got := f.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(f), got, want)
		}
	}
}
