package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"google.golang.org/protobuf/proto"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
	pb "github.com/dranode/dranode/pluginmgr/proto/dranode/plugin/v1"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		wantErr string
		check   func(t *testing.T, c config)
	}{
		{name: "defaults", raw: "", check: func(t *testing.T, c config) {
			if c.DriverName != "gpu.example.com" || *c.NumDevices != 8 || c.DevRoot != "/tmp/dranode-gpu/dev" || c.memory.String() != "40Gi" || c.HostDeviceNode != "/dev/null" || !*c.StatelessPrepare {
				t.Errorf("defaults = %+v", c)
			}
		}},
		{name: "zero devices is allowed", raw: `{"numDevices": 0}`, check: func(t *testing.T, c config) {
			if *c.NumDevices != 0 {
				t.Errorf("numDevices = %d", *c.NumDevices)
			}
		}},
		{name: "statelessPrepare off", raw: `{"statelessPrepare": false}`, check: func(t *testing.T, c config) {
			if *c.StatelessPrepare {
				t.Error("statelessPrepare = true, want false")
			}
		}},
		{name: "unknown field", raw: `{"numDevice": 2}`, wantErr: `unknown field "numDevice"`},
		{name: "negative devices", raw: `{"numDevices": -1}`, wantErr: "numDevices -1"},
		{name: "more devices than one slice holds", raw: `{"numDevices": 1000}`, check: func(t *testing.T, c config) {
			if *c.NumDevices != 1000 {
				t.Errorf("numDevices = %d", *c.NumDevices)
			}
		}},
		{name: "the upper bound is allowed", raw: `{"numDevices": 4096}`, check: func(t *testing.T, c config) {
			if *c.NumDevices != maxDevices {
				t.Errorf("numDevices = %d, want %d", *c.NumDevices, maxDevices)
			}
		}},
		{name: "above the upper bound", raw: `{"numDevices": 4097}`, wantErr: "numDevices 4097 is outside 0..4096"},
		{name: "bad driver name", raw: `{"driverName": "GPU!"}`, wantErr: `driverName: "GPU!"`},
		{name: "relative devRoot", raw: `{"devRoot": "dev"}`, wantErr: `devRoot "dev"`},
		{name: "bad memory", raw: `{"memory": "lots"}`, wantErr: `memory "lots"`},
		{name: "bad interval", raw: `{"healthPollInterval": "soon"}`, wantErr: "soon"},
		{name: "default driver's devices are /dev/gpuN", raw: "", check: func(t *testing.T, c config) {
			if got := containerPath(c, 3); got != "/dev/gpu3" {
				t.Errorf("container path %s, want /dev/gpu3", got)
			}
		}},
		{name: "another driver's devices are under its name", raw: `{"driverName": "gpu2.example.com"}`, check: func(t *testing.T, c config) {
			if got := containerPath(c, 3); got != "/dev/gpu2.example.com/gpu3" {
				t.Errorf("container path %s, want /dev/gpu2.example.com/gpu3", got)
			}
		}},
		{name: "containerDevDir as configured", raw: `{"driverName": "gpu2.example.com", "containerDevDir": "/dev/accel"}`, check: func(t *testing.T, c config) {
			if got := containerPath(c, 0); got != "/dev/accel/gpu0" {
				t.Errorf("container path %s, want /dev/accel/gpu0", got)
			}
		}},
		{name: "relative hostDeviceNode", raw: `{"hostDeviceNode": "null"}`, wantErr: `hostDeviceNode "null" must be absolute`},
		{name: "relative containerDevDir", raw: `{"containerDevDir": "dev"}`, wantErr: `containerDevDir "dev"`},
		{name: "unclean containerDevDir", raw: `{"containerDevDir": "/dev/../etc"}`, wantErr: `containerDevDir "/dev/../etc"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig([]byte(tt.raw))
			if tt.wantErr != "" {
				if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want errConfig mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestUUIDStableAndDistinct(t *testing.T) {
	seen := map[string]bool{}
	for i := range 16 {
		u := deviceUUID("gpu.example.com", i)
		if u != deviceUUID("gpu.example.com", i) {
			t.Fatalf("uuid of %d changes", i)
		}
		if seen[u] || len(u) != len("GPU-")+36 {
			t.Fatalf("uuid %q duplicate or malformed", u)
		}
		seen[u] = true
	}
	if deviceUUID("a.example.com", 0) == deviceUUID("b.example.com", 0) {
		t.Error("uuid does not depend on the driver name")
	}
}

func configured(t *testing.T, raw string) (*driver, config) {
	t.Helper()
	d := newDriver(hclog.NewNullLogger())
	if err := d.Configure(context.Background(), "node-1", []byte(raw)); err != nil {
		t.Fatal(err)
	}
	return d, d.config()
}

func opaque(driver string, requests []string, raw string) resourcev1.DeviceAllocationConfiguration {
	return resourcev1.DeviceAllocationConfiguration{
		Source:   resourcev1.AllocationConfigSourceClaim,
		Requests: requests,
		DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(raw)},
		}},
	}
}

func TestPrepareEdits(t *testing.T) {
	devRoot := t.TempDir()
	d, _ := configured(t, `{"numDevices": 2, "devRoot": "`+devRoot+`"}`)
	const timeSlicing = `{"apiVersion": "gpu.example.com/v1", "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing", "timeSlicing": {"interval": "Long"}}}`
	result := func(req, dev string) resourcev1.DeviceRequestAllocationResult {
		return resourcev1.DeviceRequestAllocationResult{Request: req, Driver: "gpu.example.com", Pool: "p", Device: dev}
	}
	tests := []struct {
		name    string
		claim   pluginmgr.Claim
		wantEnv [][]string
		wantErr string
	}{
		{name: "plain", claim: pluginmgr.Claim{UID: "1", Results: []resourcev1.DeviceRequestAllocationResult{result("r", "gpu-1")}},
			wantEnv: [][]string{{"GPU_DEVICE_GPU_EXAMPLE_COM_1=" + deviceUUID("gpu.example.com", 1)}}},
		{name: "time slicing for one request", claim: pluginmgr.Claim{UID: "2",
			Results: []resourcev1.DeviceRequestAllocationResult{result("shared", "gpu-0"), result("exclusive", "gpu-1")},
			Configs: []resourcev1.DeviceAllocationConfiguration{opaque("gpu.example.com", []string{"shared"}, timeSlicing)}},
			wantEnv: [][]string{
				{"GPU_DEVICE_GPU_EXAMPLE_COM_0=" + deviceUUID("gpu.example.com", 0), "GPU_DEVICE_GPU_EXAMPLE_COM_0_SHARING_STRATEGY=TimeSlicing", "GPU_DEVICE_GPU_EXAMPLE_COM_0_TIMESLICE_INTERVAL=Long"},
				{"GPU_DEVICE_GPU_EXAMPLE_COM_1=" + deviceUUID("gpu.example.com", 1)},
			}},
		{name: "other driver's config is ignored", claim: pluginmgr.Claim{UID: "3",
			Results: []resourcev1.DeviceRequestAllocationResult{result("r", "gpu-0")},
			Configs: []resourcev1.DeviceAllocationConfiguration{opaque("nic.example.com", nil, `not json`)}},
			wantEnv: [][]string{{"GPU_DEVICE_GPU_EXAMPLE_COM_0=" + deviceUUID("gpu.example.com", 0)}}},
		{name: "bad interval", claim: pluginmgr.Claim{UID: "4",
			Results: []resourcev1.DeviceRequestAllocationResult{result("r", "gpu-0")},
			Configs: []resourcev1.DeviceAllocationConfiguration{opaque("gpu.example.com", nil, strings.Replace(timeSlicing, "Long", "Forever", 1))}},
			wantErr: `interval "Forever"`},
		{name: "unknown device", claim: pluginmgr.Claim{UID: "5", Results: []resourcev1.DeviceRequestAllocationResult{result("r", "gpu-7")}},
			wantErr: `device "gpu-7" is not one of this driver's devices (2 GPUs`},
		{name: "wrong kind", claim: pluginmgr.Claim{UID: "6",
			Results: []resourcev1.DeviceRequestAllocationResult{result("r", "gpu-0")},
			Configs: []resourcev1.DeviceAllocationConfiguration{opaque("gpu.example.com", nil, `{"apiVersion": "gpu.example.com/v1", "kind": "NicConfig"}`)}},
			wantErr: `kind "NicConfig"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := d.Prepare(context.Background(), []pluginmgr.Claim{tt.claim})
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantErr != "" {
				if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", res[0].Err, tt.wantErr)
				}
				return
			}
			if res[0].Err != nil {
				t.Fatal(res[0].Err)
			}
			if len(res[0].Devices) != len(tt.wantEnv) {
				t.Fatalf("devices = %+v", res[0].Devices)
			}
			for i, dev := range res[0].Devices {
				if !slices.Equal(dev.Edits.Env, tt.wantEnv[i]) {
					t.Errorf("device %s env = %v, want %v", dev.Device, dev.Edits.Env, tt.wantEnv[i])
				}
				// The claim's status shows the GPU ready, with its UUID.
				idx, _ := strconv.Atoi(strings.TrimPrefix(dev.Device, "gpu-"))
				st := dev.Status
				if st == nil || len(st.Conditions) != 1 || st.Conditions[0].Type != "Ready" || st.Conditions[0].Status != metav1.ConditionTrue || st.Data == nil {
					t.Fatalf("device %s status = %+v, want Ready with data", dev.Device, st)
				}
				var data statusData
				if err := json.Unmarshal(st.Data.Raw, &data); err != nil || data.UUID != deviceUUID("gpu.example.com", idx) || data.Model != "Example GPU 40G" {
					t.Errorf("device %s status data %s (%v), want its UUID and model", dev.Device, st.Data.Raw, err)
				}
				node := dev.Edits.DeviceNodes[0]
				if node.HostPath != "/dev/null" || node.Path != "/dev/"+strings.Replace(dev.Device, "-", "", 1) {
					t.Errorf("device node = %+v, want /dev/gpuN from /dev/null", node)
				}
			}
		})
	}
}

// Shared GPUs are published with allowMultipleAllocations and consumable
// memory, partitioned ones as a whole and partitions on one counter set,
// and the inventory is one the API server accepts (inventory.Validate).
// Each share is prepared as its own entry with its share ID and memory;
// admin access is marked in the environment.
func TestSharedPartitionedAndAdminAccess(t *testing.T) {
	d, cfg := configured(t, `{"numDevices": 1, "sharedGPUs": 1, "partitionedGPUs": 1, "partitions": 2, "memory": "40Gi", "devRoot": "`+t.TempDir()+`"}`)
	inv := buildInventory(cfg, "node-1")
	if err := inventory.Validate(inv); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, dev := range inv.Pools[0].Devices {
		names = append(names, dev.Name)
	}
	if want := []string{"gpu-0", "shared-gpu-0", "partitioned-gpu-0", "partitioned-gpu-0-part-0", "partitioned-gpu-0-part-1"}; !slices.Equal(names, want) {
		t.Fatalf("devices %v, want %v", names, want)
	}
	shared := inv.Pools[0].Devices[1]
	if shared.AllowMultipleAllocations == nil || !*shared.AllowMultipleAllocations || shared.Capacity["memory"].RequestPolicy == nil {
		t.Errorf("shared-gpu-0 = %+v, want allowMultipleAllocations and a request policy", shared)
	}
	if sets := inv.Pools[0].SharedCounters; len(sets) != 1 || sets[0].Name != "partitioned-gpu-0" {
		t.Errorf("counter sets %+v, want partitioned-gpu-0", sets)
	}
	for _, dev := range inv.Pools[0].Devices[2:] {
		if len(dev.ConsumesCounters) != 1 || dev.ConsumesCounters[0].CounterSet != "partitioned-gpu-0" {
			t.Errorf("%s consumes %+v, want from partitioned-gpu-0", dev.Name, dev.ConsumesCounters)
		}
	}

	share := func(id string) *types.UID { u := types.UID(id); return &u }
	ten := resource.MustParse("10Gi")
	claim := pluginmgr.Claim{UID: "c", Namespace: "n", Name: "c", Results: []resourcev1.DeviceRequestAllocationResult{
		{Request: "a", Driver: "gpu.example.com", Pool: "p", Device: "shared-gpu-0", ShareID: share("11111111-aaaa"), ConsumedCapacity: map[resourcev1.QualifiedName]resource.Quantity{"memory": ten}},
		{Request: "b", Driver: "gpu.example.com", Pool: "p", Device: "shared-gpu-0", ShareID: share("22222222-bbbb")},
		{Request: "m", Driver: "gpu.example.com", Pool: "p", Device: "gpu-0", AdminAccess: ptr.To(true)},
		{Request: "p", Driver: "gpu.example.com", Pool: "p", Device: "partitioned-gpu-0-part-1"},
	}}
	res, err := d.Prepare(context.Background(), []pluginmgr.Claim{claim})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res[0].Err)
	}
	want := []struct {
		share, node string
		env         []string
	}{
		{"11111111-aaaa", "/dev/shared-gpu0", []string{"GPU_DEVICE_GPU_EXAMPLE_COM_SHARED_0=" + uuidOf("gpu.example.com", "shared-gpu-0"), "GPU_DEVICE_GPU_EXAMPLE_COM_SHARED_0_SHARE_11111111_AAAA=10Gi"}},
		{"22222222-bbbb", "/dev/shared-gpu0", []string{"GPU_DEVICE_GPU_EXAMPLE_COM_SHARED_0=" + uuidOf("gpu.example.com", "shared-gpu-0"), "GPU_DEVICE_GPU_EXAMPLE_COM_SHARED_0_SHARE_22222222_BBBB=default"}},
		{"", "/dev/gpu0", []string{"GPU_DEVICE_GPU_EXAMPLE_COM_0=" + deviceUUID("gpu.example.com", 0), "GPU_DEVICE_GPU_EXAMPLE_COM_0_ACCESS=monitor"}},
		{"", "/dev/partitioned-gpu0-part1", []string{"GPU_DEVICE_GPU_EXAMPLE_COM_PARTITIONED_0_PART_1=" + uuidOf("gpu.example.com", "partitioned-gpu-0-part-1")}},
	}
	if len(res[0].Devices) != len(want) {
		t.Fatalf("devices %+v", res[0].Devices)
	}
	for i, dev := range res[0].Devices {
		if dev.ShareID != want[i].share || dev.Edits.DeviceNodes[0].Path != want[i].node || !slices.Equal(dev.Edits.Env, want[i].env) {
			t.Errorf("device %d (%s): share %q, node %s, env %v; want %q, %s, %v", i, dev.Device, dev.ShareID, dev.Edits.DeviceNodes[0].Path, dev.Edits.Env, want[i].share, want[i].node, want[i].env)
		}
	}
	for _, bad := range []string{"shared-gpu-1", "partitioned-gpu-0-part-2", "partitioned-gpu-1", "gpu-01"} {
		res, _ := d.Prepare(context.Background(), []pluginmgr.Claim{{UID: "x", Results: []resourcev1.DeviceRequestAllocationResult{{Request: "r", Driver: "gpu.example.com", Pool: "p", Device: bad}}}})
		if res[0].Err == nil {
			t.Errorf("Prepare of %s succeeded, want an error", bad)
		}
	}
}

func TestUnhealthyDevice(t *testing.T) {
	devRoot := t.TempDir()
	d, cfg := configured(t, `{"numDevices": 2, "devRoot": "`+devRoot+`"}`)
	if err := os.WriteFile(filepath.Join(devRoot, "gpu1.unhealthy"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	snap := healthSnapshot(cfg, "p")
	if snap[0].Status != pluginmgr.Healthy || snap[1].Status != pluginmgr.Unhealthy || !strings.Contains(snap[1].Message, "gpu1.unhealthy") {
		t.Errorf("health = %+v", snap)
	}
	res, err := d.Prepare(context.Background(), []pluginmgr.Claim{{UID: "u", Results: []resourcev1.DeviceRequestAllocationResult{
		{Request: "r", Driver: "gpu.example.com", Pool: "p", Device: "gpu-1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "gpu-1 is unhealthy") {
		t.Errorf("Prepare of an unhealthy GPU = %+v", res[0])
	}
}

func TestPoolIsNamedAfterTheConfiguredNode(t *testing.T) {
	d, _ := configured(t, `{"numDevices": 1, "devRoot": "`+t.TempDir()+`"}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got inventory.Inventory
	err := d.WatchDevices(ctx, func(inv inventory.Inventory) error {
		got = inv
		cancel()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Pools) != 1 || got.Pools[0].Name != "node-1" {
		t.Fatalf("pools %+v, want one pool named after the configured node node-1", got.Pools)
	}
}

// The bound on numDevices exists because the whole inventory is one gRPC
// message to the agent; this measures that message at the bound, with the
// longest model the configuration accepts, against gRPC's default 4 MiB.
func TestMaxDevicesFitOneMessage(t *testing.T) {
	const grpcDefaultMaxReceive = 4 << 20
	cfg, err := parseConfig([]byte(`{"numDevices": 4096, "driverName": "` + strings.Repeat("g", 50) + `.example.com", "model": "` + strings.Repeat("m", 64) + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	inv := buildInventory(cfg, strings.Repeat("n", 63))
	pool := &pb.Pool{Name: inv.Pools[0].Name}
	for i := range inv.Pools[0].Devices {
		b, err := inv.Pools[0].Devices[i].Marshal()
		if err != nil {
			t.Fatal(err)
		}
		pool.Devices = append(pool.Devices, b)
	}
	size := proto.Size(&pb.Inventory{Pools: []*pb.Pool{pool}})
	t.Logf("%d devices: %d bytes on the wire, %d per device", len(pool.Devices), size, size/len(pool.Devices))
	if len(pool.Devices) != maxDevices {
		t.Fatalf("inventory has %d devices, want %d", len(pool.Devices), maxDevices)
	}
	if size > grpcDefaultMaxReceive/2 {
		t.Errorf("inventory of %d devices is %d bytes, more than half of gRPC's default %d", maxDevices, size, grpcDefaultMaxReceive)
	}
}

// Two instances of the plugin (two driver names) on one node: a claim with
// gpu-0 of each must not inject both at one container path, nor set one
// environment variable twice.
func TestTwoInstancesDoNotCollide(t *testing.T) {
	var paths, env []string
	for _, name := range []string{"gpu.example.com", "gpu2.example.com"} {
		d, _ := configured(t, `{"driverName": "`+name+`", "numDevices": 1, "devRoot": "`+t.TempDir()+`"}`)
		claim := pluginmgr.Claim{UID: "1", Results: []resourcev1.DeviceRequestAllocationResult{{Request: "r", Driver: name, Pool: "p", Device: "gpu-0"}}}
		res, err := d.Prepare(context.Background(), []pluginmgr.Claim{claim})
		if err != nil || res[0].Err != nil {
			t.Fatalf("prepare on %s: %v %v", name, err, res[0].Err)
		}
		for _, n := range res[0].Devices[0].Edits.DeviceNodes {
			if slices.Contains(paths, n.Path) {
				t.Errorf("driver %s injects %s, which the other instance injects too", name, n.Path)
			}
			paths = append(paths, n.Path)
		}
		for _, e := range res[0].Devices[0].Edits.Env {
			name, _, _ := strings.Cut(e, "=")
			if slices.Contains(env, name) {
				t.Errorf("driver %s sets %s, which the other instance sets too", name, e)
			}
			env = append(env, name)
		}
	}
	if len(paths) != 2 {
		t.Errorf("device nodes %v, want one per instance", paths)
	}
}

func TestEnvPrefix(t *testing.T) {
	for _, tt := range []struct {
		driver string
		i      int
		want   string
	}{
		{"gpu.example.com", 0, "GPU_DEVICE_GPU_EXAMPLE_COM_0"},
		{"gpu2.example.com", 12, "GPU_DEVICE_GPU2_EXAMPLE_COM_12"},
		{"my-gpu.example.org", 3, "GPU_DEVICE_MY_GPU_EXAMPLE_ORG_3"},
	} {
		if got := envPrefix(tt.driver, tt.i); got != tt.want {
			t.Errorf("envPrefix(%q, %d) = %s, want %s", tt.driver, tt.i, got, tt.want)
		}
	}
}

// hostDeviceNode must be what a container runtime accepts as the host side
// of a CDI device node; Configure refuses anything else, naming it.
func TestHostDeviceNodeChecked(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "gpu0")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		node, wantErr string
	}{
		{"/dev/null", ""},
		{file, "hostDeviceNode " + file + " is not a character or block device (mode -rw-r--r--)"},
		{dir, "is not a character or block device (mode d"},
		{filepath.Join(dir, "missing"), "no such file or directory"},
	} {
		d := newDriver(hclog.NewNullLogger())
		err := d.Configure(context.Background(), "node-1", []byte(`{"devRoot": "`+filepath.Join(dir, "markers")+`", "hostDeviceNode": "`+tt.node+`"}`))
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("hostDeviceNode %s: %v", tt.node, err)
			}
			continue
		}
		if !errors.Is(err, errConfig) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("hostDeviceNode %s: error %v, want errConfig saying %q", tt.node, err, tt.wantErr)
		}
	}
}

// A host device node that disappears after Configure makes every GPU
// unhealthy and Prepare refuse, instead of a spec the runtime refuses.
func TestHostDeviceNodeGone(t *testing.T) {
	dir := t.TempDir()
	node := filepath.Join(dir, "null")
	if err := os.Symlink("/dev/null", node); err != nil {
		t.Fatal(err)
	}
	d, cfg := configured(t, `{"numDevices": 2, "devRoot": "`+dir+`", "hostDeviceNode": "`+node+`"}`)
	if snap := healthSnapshot(cfg, "p"); snap[0].Status != pluginmgr.Healthy {
		t.Fatalf("health = %+v", snap)
	}
	if err := os.Remove(node); err != nil {
		t.Fatal(err)
	}
	snap := healthSnapshot(cfg, "p")
	if snap[0].Status != pluginmgr.Unhealthy || snap[1].Status != pluginmgr.Unhealthy || !strings.Contains(snap[1].Message, node) {
		t.Errorf("health after removing %s = %+v", node, snap)
	}
	res, err := d.Prepare(context.Background(), []pluginmgr.Claim{{UID: "u", Results: []resourcev1.DeviceRequestAllocationResult{
		{Request: "r", Driver: "gpu.example.com", Pool: "p", Device: "gpu-0"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), node) {
		t.Errorf("Prepare without the host device node = %+v", res[0])
	}
}
