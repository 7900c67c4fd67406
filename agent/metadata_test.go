package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dranode/dranode/cdi"
	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
)

// readMetadata decodes a metadata file: a stream of the same object in
// each version, newest first.
func readMetadata(t *testing.T, file string) []deviceMetadata {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("device metadata: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var out []deviceMetadata
	for {
		var dm deviceMetadata
		if err := dec.Decode(&dm); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("device metadata %s: %v\n%s", file, err, data)
		}
		out = append(out, dm)
	}
}

// The file of each request holds its devices' attributes from the
// inventory and network data from the plugin's status, in v1beta1 and then
// v1alpha1; the claim's spec gets a read-only bind mount of it at the
// documented container path, named on the request's first device.
func TestMetadataFileAndMount(t *testing.T) {
	inv := inventory.Inventory{Pools: []inventory.Pool{{Name: "pool", Devices: []resourcev1.Device{
		{Name: "gpu-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"model": {StringValue: ptrTo("A100")}, "index": {IntValue: ptrTo(int64(0))}}},
		{Name: "nic-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"speed": {IntValue: ptrTo(int64(100))}}},
	}}}}
	results := []resourcev1.DeviceRequestAllocationResult{
		{Request: "gpu/big", Driver: "gpu.example.com", Pool: "pool", Device: "gpu-0"},
		{Request: "net", Driver: "gpu.example.com", Pool: "pool", Device: "nic-0"},
	}
	prepared := []pluginmgr.PreparedDevice{
		{Pool: "pool", Device: "gpu-0", Requests: []string{"gpu/big"}, Edits: pluginmgr.ContainerEdits{Env: []string{"GPU=0"}}},
		{Pool: "pool", Device: "nic-0", Requests: []string{"net"}, Edits: pluginmgr.ContainerEdits{Env: []string{"NIC=0"}}, Status: &resourcev1.AllocatedDeviceStatus{NetworkData: &resourcev1.NetworkDeviceData{InterfaceName: "eth1", IPs: []string{"10.0.0.2/24"}}}},
	}
	tests := []struct {
		name          string
		annotations   map[string]string
		containerPath string // of the gpu request's file
		podClaimName  *string
	}{
		{"claim", nil, "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/my-claim/gpu/gpu.example.com-metadata.json", nil},
		{"from a template", map[string]string{resourcev1.PodResourceClaimAnnotation: "gpus"},
			"/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpus/gpu/gpu.example.com-metadata.json", ptrTo("gpus")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pluginsDir := t.TempDir()
			claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "my-claim", UID: "uid-1", Annotations: tt.annotations}}
			spec, recorded, err := buildSpec("gpu.example.com", "uid-1", prepared, results)
			if err != nil {
				t.Fatal(err)
			}
			if err := addMetadata(pluginsDir, "gpu.example.com", claim, inv, results, prepared, spec, recorded); err != nil {
				t.Fatal(err)
			}
			gpuFile := filepath.Join(pluginsDir, "gpu.example.com", "dra-device-metadata", "uid-1", "gpu", "metadata.json")
			stream := readMetadata(t, gpuFile)
			if len(stream) != 2 || stream[0].APIVersion != "metadata.resource.k8s.io/v1beta1" || stream[1].APIVersion != "metadata.resource.k8s.io/v1alpha1" {
				t.Fatalf("versions %+v, want v1beta1 then v1alpha1", stream)
			}
			want := deviceMetadata{Kind: "DeviceMetadata", APIVersion: "metadata.resource.k8s.io/v1beta1",
				Metadata: metadataObject{Name: "my-claim", Namespace: "ns", UID: "uid-1", Generation: 1}, PodClaimName: tt.podClaimName,
				Requests: []metadataRequest{{Name: "gpu/big", Devices: []metadataDevice{{Driver: "gpu.example.com", Pool: "pool", Name: "gpu-0", Attributes: inv.Pools[0].Devices[0].Attributes}}}}}
			if got := stream[0]; !jsonEqual(t, got, want) {
				t.Errorf("gpu metadata\n got %+v\nwant %+v", got, want)
			}
			net := readMetadata(t, filepath.Join(filepath.Dir(filepath.Dir(gpuFile)), "net", "metadata.json"))[0]
			if d := net.Requests[0].Devices[0]; d.NetworkData == nil || d.NetworkData.InterfaceName != "eth1" || *d.Attributes["speed"].IntValue != 100 {
				t.Errorf("net metadata device %+v, want its speed and eth1", d)
			}

			var mount *cdi.Mount
			for _, d := range spec.Devices {
				if d.Name == "uid-1_metadata_gpu" {
					mount = &d.ContainerEdits.Mounts[0]
				}
			}
			if mount == nil || mount.HostPath != gpuFile || mount.ContainerPath != tt.containerPath || !slices.Equal(mount.Options, []string{"ro", "bind"}) {
				t.Fatalf("mount %+v, want %s at %s, ro bind", mount, gpuFile, tt.containerPath)
			}
			if err := spec.Validate(); err != nil {
				t.Errorf("spec with the mounts: %v", err)
			}
			wantIDs := [][]string{
				{"gpu.example.com/claim=uid-1-gpu-0", "gpu.example.com/claim=uid-1_metadata_gpu"},
				{"gpu.example.com/claim=uid-1-nic-0", "gpu.example.com/claim=uid-1_metadata_net"},
			}
			for i, d := range recorded {
				if !slices.Equal(d.CDIDeviceIDs, wantIDs[i]) {
					t.Errorf("device %s CDI IDs %v, want %v", d.Device, d.CDIDeviceIDs, wantIDs[i])
				}
			}

			gone, err := sweepMetadata(pluginsDir, "gpu.example.com", func(uid string) bool { return uid == "uid-1" })
			if err != nil || len(gone) != 0 {
				t.Errorf("sweep of a recorded claim removed %v, %v", gone, err)
			}
			if err := removeMetadata(pluginsDir, "gpu.example.com", "uid-1"); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(gpuFile); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("metadata file after removal: %v", err)
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}

// With cdi.deviceMetadata on, a claim prepared through the kubelet API
// with the real gpu plugin gets the metadata CDI device: the spec mounts
// the file, the file holds the attributes the plugin published, and
// Unprepare removes it. Off (the default), nothing of it is written.
func TestMetadataThroughTheAgent(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(map[bool]string{true: "on", false: "off"}[on], func(t *testing.T) {
			e := newTestEnv(t, gpuDriver)
			e.cfg.CDI.DeviceMetadata = on
			e.start(t, Options{})
			c := claim("default", "meta", "00000000-0000-0000-0005-000000000000", "node-a", [2]string{gpuDriver, "gpu-2"})
			c.Status.Allocation.Devices.Results[0].Pool = e.cfg.NodeName // the gpu plugin's pool, whose attributes are written
			e.writeClaim(t, c)
			k := connectKubelet(t, e.cfg, gpuDriver)
			r := k.prepare(t, c)[string(c.UID)]
			if r.Error != "" {
				t.Fatal(r.Error)
			}
			metaID := cdi.QualifiedName(gpuDriver, cdi.ClaimClass, string(c.UID)+"_metadata_req")
			if got := slices.Contains(r.Devices[0].CdiDeviceIds, metaID); got != on {
				t.Fatalf("CDI IDs %v: metadata device %s there = %v, want %v", r.Devices[0].CdiDeviceIds, metaID, got, on)
			}
			file := filepath.Join(metadataDir(e.cfg.Kubelet.PluginsDir, gpuDriver, string(c.UID)), "req", "metadata.json")
			if !on {
				if _, err := os.Stat(filepath.Dir(filepath.Dir(file))); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("metadata directory with the key off: %v", err)
				}
				return
			}
			spec := readSpec(t, specPath(e.cfg, gpuDriver, string(c.UID)))
			var mounts []cdi.Mount
			for _, d := range spec.Devices {
				if d.Name == string(c.UID)+"_metadata_req" {
					mounts = d.ContainerEdits.Mounts
				}
			}
			if len(mounts) != 1 || mounts[0].HostPath != file || mounts[0].ContainerPath != "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/meta/req/gpu.example.com-metadata.json" {
				t.Fatalf("metadata mounts %+v, want %s", mounts, file)
			}
			dev := readMetadata(t, file)[0].Requests[0].Devices[0]
			if dev.Name != "gpu-2" || dev.Attributes["index"].IntValue == nil || *dev.Attributes["index"].IntValue != 2 || dev.Attributes["uuid"].StringValue == nil {
				t.Errorf("metadata device %+v, want gpu-2 with the plugin's index and uuid", dev)
			}
			if u := k.unprepare(t, c)[string(c.UID)]; u.Error != "" {
				t.Fatal(u.Error)
			}
			if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("metadata file after Unprepare: %v", err)
			}
		})
	}
}
