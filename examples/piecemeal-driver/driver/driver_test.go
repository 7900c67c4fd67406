package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/cdi"
	"github.com/dranode/dranode/claimcache"
)

const (
	testDriver = "piecemeal.example.com"
	testNode   = "node-a"
)

// testConfig lays out a node's directories under t.TempDir().
func testConfig(t *testing.T) Config {
	t.Helper()
	root := t.TempDir()
	return Config{
		DriverName: testDriver, NodeName: testNode, NumDevices: 4,
		DevRoot: filepath.Join(root, "dev"), CDIDir: filepath.Join(root, "cdi"),
		StateDir: filepath.Join(root, "state"), BootID: "boot-1",
	}
}

func open(t *testing.T, cfg Config) *Driver {
	t.Helper()
	d, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// claim is an allocated claim with one result per device of testDriver's
// pool on testNode.
func claim(name, uid string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)},
		Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
	}
	for i, dev := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "req" + string(rune('0'+i)), Driver: testDriver, Pool: testNode, Device: dev,
		})
	}
	return c
}

func prepare(t *testing.T, d *Driver, c *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	t.Helper()
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 {
		t.Fatalf("prepare of one claim gave %d results", len(res))
	}
	r, ok := res[c.UID]
	if !ok {
		t.Fatalf("no result for claim UID %s: %v", c.UID, res)
	}
	return r.Devices, r.Err
}

func mustPrepare(t *testing.T, d *Driver, c *resourceapi.ResourceClaim) []string {
	t.Helper()
	devices, err := prepare(t, d, c)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, dev := range devices {
		ids = append(ids, dev.CDIDeviceIDs...)
	}
	return ids
}

func unprepare(t *testing.T, d *Driver, c *resourceapi.ResourceClaim) {
	t.Helper()
	obj := kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID}
	res, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{obj})
	if err != nil {
		t.Fatal(err)
	}
	if err, ok := res[c.UID]; !ok || err != nil {
		t.Fatalf("unprepare %s: result %v present %v", c.Name, err, ok)
	}
}

func specPath(cfg Config, uid string) string {
	return filepath.Join(cfg.CDIDir, cdi.TransientSpecFileName(cfg.DriverName, cdi.ClaimClass, uid))
}

// readSpec loads the claim's spec file as a runtime would (strictly) and
// returns it.
func readSpec(t *testing.T, cfg Config, uid string) *cdi.Spec {
	t.Helper()
	data, err := os.ReadFile(specPath(cfg, uid))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := cdi.DecodeSpec(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	return spec
}

func markUnhealthy(t *testing.T, cfg Config, index string) {
	t.Helper()
	if err := os.MkdirAll(cfg.DevRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.DevRoot, "gpu"+index+".unhealthy"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPrepareWritesSpecAndRecord(t *testing.T) {
	cfg := testConfig(t)
	d := open(t, cfg)
	c := claim("two", "uid-2", "gpu-1", "gpu-3")
	devices, err := prepare(t, d, c)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{testDriver + "/claim=uid-2-gpu-1", testDriver + "/claim=uid-2-gpu-3"}
	var ids []string
	for i, dev := range devices {
		if dev.PoolName != testNode || dev.DeviceName != c.Status.Allocation.Devices.Results[i].Device {
			t.Errorf("device %d is %s/%s, want the allocated %s/%s", i, dev.PoolName, dev.DeviceName, testNode, c.Status.Allocation.Devices.Results[i].Device)
		}
		ids = append(ids, dev.CDIDeviceIDs...)
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("CDI IDs %v, want %v", ids, want)
	}
	spec := readSpec(t, cfg, "uid-2")
	names, err := spec.QualifiedNames()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, want) {
		t.Errorf("spec defines %v, want %v", names, want)
	}
	if got := spec.Devices[1].ContainerEdits.DeviceNodes[0]; got.Path != "/dev/gpu3" || got.HostPath != "/dev/null" {
		t.Errorf("gpu-3 injects %+v, want /dev/gpu3 from /dev/null", got)
	}
	if env := spec.Devices[1].ContainerEdits.Env; len(env) != 1 || !strings.HasPrefix(env[0], "GPU_DEVICE_PIECEMEAL_EXAMPLE_COM_3=GPU-") {
		t.Errorf("gpu-3 sets env %v", env)
	}
	e, err := d.record.Get("uid-2")
	if err != nil {
		t.Fatal(err)
	}
	if e.State != claimcache.Prepared || !slices.Equal(e.CDIDeviceIDs(testDriver), want) {
		t.Errorf("recorded %s with %v, want Prepared with %v", e.State, e.CDIDeviceIDs(testDriver), want)
	}
}

// A prepare repeated in the same boot (the kubelet restarted), also by a
// restarted driver, is answered from the record: a device marked unhealthy
// since would make a real prepare fail. A spec removed meanwhile is
// written again.
func TestPrepareAgainInSameBootAnswersFromRecord(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "same process", true: "restarted driver"}[restart], func(t *testing.T) {
			cfg := testConfig(t)
			d := open(t, cfg)
			c := claim("one", "uid-1", "gpu-0")
			first := mustPrepare(t, d, c)
			before, err := os.ReadFile(specPath(cfg, "uid-1"))
			if err != nil {
				t.Fatal(err)
			}
			markUnhealthy(t, cfg, "0")
			if restart {
				if err := d.Close(); err != nil {
					t.Fatal(err)
				}
				d = open(t, cfg)
			}
			if again := mustPrepare(t, d, c); !slices.Equal(again, first) {
				t.Errorf("CDI IDs %v, then %v", first, again)
			}
			if err := os.Remove(specPath(cfg, "uid-1")); err != nil {
				t.Fatal(err)
			}
			mustPrepare(t, d, c)
			after, err := os.ReadFile(specPath(cfg, "uid-1"))
			if err != nil {
				t.Fatalf("spec not written again: %v", err)
			}
			if string(after) != string(before) {
				t.Errorf("spec written again differs:\n%s\nwas:\n%s", after, before)
			}
		})
	}
}

// After a reboot (another boot ID) nothing recorded is prepared any more:
// the next prepare runs again, and here refuses the device marked
// unhealthy in the meantime.
func TestRebootPreparesAgain(t *testing.T) {
	cfg := testConfig(t)
	d := open(t, cfg)
	c := claim("one", "uid-1", "gpu-2")
	first := mustPrepare(t, d, c)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	markUnhealthy(t, cfg, "2")
	cfg.BootID = "boot-2"
	d = open(t, cfg)
	if _, err := prepare(t, d, c); !errors.Is(err, ErrClaimRefused) || !strings.Contains(err.Error(), "unhealthy") {
		t.Fatalf("prepare after reboot: %v; want the refusal of the unhealthy device", err)
	}
	if err := os.Remove(filepath.Join(cfg.DevRoot, "gpu2.unhealthy")); err != nil {
		t.Fatal(err)
	}
	if again := mustPrepare(t, d, c); !slices.Equal(again, first) {
		t.Errorf("CDI IDs %v before the reboot, %v after", first, again)
	}
	if e, err := d.record.Get("uid-1"); err != nil || !e.PreparedInCurrentBoot() || e.BootID != "boot-2" {
		t.Errorf("record after the new prepare: %+v, %v", e, err)
	}
}

// Unprepare needs only the UID: the spec goes, the record entry goes, and
// a repeat or an unknown claim succeeds.
func TestUnprepareFromRecord(t *testing.T) {
	cfg := testConfig(t)
	d := open(t, cfg)
	c := claim("one", "uid-1", "gpu-0")
	mustPrepare(t, d, c)
	unprepare(t, d, c)
	if _, err := os.Stat(specPath(cfg, "uid-1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("spec still there after unprepare: %v", err)
	}
	if _, err := d.record.Get("uid-1"); !errors.Is(err, claimcache.ErrNotFound) {
		t.Errorf("record after unprepare: %v", err)
	}
	unprepare(t, d, c)
	unprepare(t, d, claim("never", "uid-never"))
	// The device is free again.
	mustPrepare(t, d, claim("next", "uid-next", "gpu-0"))
}

func TestPrepareRefuses(t *testing.T) {
	notMine := claim("other-driver", "uid-x", "gpu-0")
	notMine.Status.Allocation.Devices.Results[0].Driver = "other.example.com"
	otherPool := claim("other-pool", "uid-x", "gpu-0")
	otherPool.Status.Allocation.Devices.Results[0].Pool = "node-b"
	unallocated := claim("unallocated", "uid-x")
	unallocated.Status.Allocation = nil
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		setup func(t *testing.T, cfg Config, d *Driver)
		want  string
	}{
		{name: "no devices of the driver", claim: notMine, want: "no devices of driver " + testDriver},
		{name: "unknown device", claim: claim("unknown", "uid-x", "gpu-9"), want: "device node-a/gpu-9 is not one"},
		{name: "malformed device", claim: claim("malformed", "uid-x", "gpu-01"), want: "device node-a/gpu-01 is not one"},
		{name: "other pool", claim: otherPool, want: "device node-b/gpu-0 is not one"},
		{name: "not allocated", claim: unallocated, want: "not allocated"},
		{name: "unhealthy", claim: claim("sick", "uid-x", "gpu-1"), want: "gpu-1 is unhealthy",
			setup: func(t *testing.T, cfg Config, _ *Driver) { markUnhealthy(t, cfg, "1") }},
		{name: "device of another claim", claim: claim("second", "uid-x", "gpu-3"), want: "device " + testDriver + "/node-a/gpu-3 is in use by claim ns/first (uid uid-first, prepared)",
			setup: func(t *testing.T, _ Config, d *Driver) { mustPrepare(t, d, claim("first", "uid-first", "gpu-3")) }},
		{name: "device of a claim being prepared", claim: claim("second", "uid-x", "gpu-2"), want: "gpu-2 is in use by claim ns/first (uid uid-first, being prepared)",
			setup: func(t *testing.T, _ Config, d *Driver) {
				// As a prepare of "first" does between checking its devices
				// and recording them.
				first := claimcache.ClaimRef{Namespace: "ns", Name: "first", UID: "uid-first"}
				if _, err := d.record.Hold(first, map[string][]claimcache.Device{testDriver: {{Pool: testNode, Device: "gpu-2"}}}, nil); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "device of a claim whose unprepare failed", claim: claim("second", "uid-x", "gpu-1"), want: "gpu-1 is in use by claim ns/first (uid uid-first, being unprepared, or its unprepare failed)",
			setup: func(t *testing.T, _ Config, d *Driver) {
				mustPrepare(t, d, claim("first", "uid-first", "gpu-1"))
				if _, err := d.record.StartUnprepare("uid-first"); err != nil { // the teardown then fails
					t.Fatal(err)
				}
			}},
		{name: "device of the claim's earlier incarnation", claim: claim("same", "uid-x", "gpu-0"), want: "gpu-0 is in use by claim ns/same (uid uid-old, prepared)",
			setup: func(t *testing.T, _ Config, d *Driver) { mustPrepare(t, d, claim("same", "uid-old", "gpu-0")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			d := open(t, cfg)
			if tc.setup != nil {
				tc.setup(t, cfg, d)
			}
			_, err := prepare(t, d, tc.claim)
			if inUse := strings.Contains(tc.want, "in use"); inUse != errors.Is(err, claimcache.ErrDeviceInUse) {
				t.Errorf("prepare: %v; matches claimcache.ErrDeviceInUse: %v, want %v", err, !inUse, inUse)
			}
			if !errors.Is(err, ErrClaimRefused) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.claim.Name) {
				t.Fatalf("prepare: %v; want ErrClaimRefused naming the claim and %q", err, tc.want)
			}
			if _, err := d.record.Get("uid-x"); !errors.Is(err, claimcache.ErrNotFound) {
				t.Errorf("refused claim is recorded: %v", err)
			}
			if _, err := os.Stat(specPath(cfg, "uid-x")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("refused claim has a spec: %v", err)
			}
		})
	}
}

// Prepares of different claims run at once (the helper does not serialize
// them): claims that want one device get it once, and calls for one claim
// do not interleave.
func TestConcurrentPrepares(t *testing.T) {
	const callers = 8
	for _, tc := range []struct {
		name        string
		claim       func(i int) *resourceapi.ResourceClaim
		wantOK      int
		wantEntries int
	}{
		{name: "claims wanting one device", claim: func(i int) *resourceapi.ResourceClaim {
			return claim(fmt.Sprintf("c%d", i), fmt.Sprintf("uid-%d", i), "gpu-1")
		}, wantOK: 1, wantEntries: 1},
		{name: "claims with their own devices", claim: func(i int) *resourceapi.ResourceClaim {
			return claim(fmt.Sprintf("c%d", i), fmt.Sprintf("uid-%d", i), fmt.Sprintf("gpu-%d", i%4))
		}, wantOK: 4, wantEntries: 4},
		{name: "one claim asked for by every caller", claim: func(int) *resourceapi.ResourceClaim {
			return claim("same", "uid-same", "gpu-0", "gpu-2")
		}, wantOK: callers, wantEntries: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			d := open(t, cfg)
			var mu sync.Mutex
			ok, ids := 0, map[string]bool{}
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() {
					c := tc.claim(i)
					res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
					if err != nil {
						t.Error(err)
						return
					}
					r := res[c.UID]
					mu.Lock()
					defer mu.Unlock()
					switch {
					case r.Err == nil:
						ok++
						for _, dev := range r.Devices {
							ids[strings.Join(dev.CDIDeviceIDs, ",")] = true
						}
					case !errors.Is(r.Err, ErrClaimRefused):
						t.Errorf("claim %s: %v; want success or ErrClaimRefused", c.Name, r.Err)
					}
				})
			}
			wg.Wait()
			if ok != tc.wantOK {
				t.Errorf("%d of %d prepares succeeded, want %d", ok, callers, tc.wantOK)
			}
			entries := d.record.List()
			if len(entries) != tc.wantEntries {
				t.Fatalf("record holds %d claims, want %d: %+v", len(entries), tc.wantEntries, entries)
			}
			devices := 0
			for _, e := range entries {
				if !e.PreparedInCurrentBoot() {
					t.Errorf("claim %s is %s, want prepared", e.Claim, e.State)
				}
				devices += len(e.Drivers[testDriver])
				readSpec(t, cfg, e.Claim.UID)
			}
			if len(ids) != devices {
				t.Errorf("callers were handed %d distinct CDI IDs for %d recorded devices: %v", len(ids), devices, ids)
			}
			for i := range 4 {
				holders := d.record.Holders(testDriver, testNode, fmt.Sprint("gpu-", i))
				if len(holders) > 1 {
					t.Errorf("gpu-%d held by %v after every prepare returned", i, holders)
				}
			}
		})
	}
}

// One failing claim in a batch does not fail the others.
func TestPrepareBatchIsPerClaim(t *testing.T) {
	cfg := testConfig(t)
	d := open(t, cfg)
	good, bad := claim("good", "uid-good", "gpu-0"), claim("bad", "uid-bad", "gpu-7")
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{good, bad})
	if err != nil {
		t.Fatal(err)
	}
	if r := res[good.UID]; r.Err != nil || len(r.Devices) != 1 {
		t.Errorf("good claim: %+v", r)
	}
	if r := res[bad.UID]; !errors.Is(r.Err, ErrClaimRefused) {
		t.Errorf("bad claim: %+v", r)
	}
}

// A claim recreated under the same name with a new UID (the old pod was
// force-deleted before its claim was unprepared) first unprepares the old
// one, from the record, when it wants other devices; one that wants the
// old one's devices waits for its unprepare (the old pod's containers may
// still use them).
func TestRecreatedClaimUnpreparesOldOne(t *testing.T) {
	cfg := testConfig(t)
	d := open(t, cfg)
	mustPrepare(t, d, claim("same", "uid-old", "gpu-0"))
	ids := mustPrepare(t, d, claim("same", "uid-new", "gpu-1"))
	if want := testDriver + "/claim=uid-new-gpu-1"; !slices.Equal(ids, []string{want}) {
		t.Errorf("CDI IDs %v, want [%s]", ids, want)
	}
	if _, err := os.Stat(specPath(cfg, "uid-old")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old claim's spec still there: %v", err)
	}
	if _, err := d.record.Get("uid-old"); !errors.Is(err, claimcache.ErrNotFound) {
		t.Errorf("old claim still recorded: %v", err)
	}
}

// A crash during an unprepare, and one between writing a spec and
// recording its claim: New finishes the first and removes the leaked spec,
// and leaves other drivers' specs alone.
func TestNewCleansUpAfterCrash(t *testing.T) {
	cfg := testConfig(t)
	d := open(t, cfg)
	mustPrepare(t, d, claim("kept", "uid-kept", "gpu-0"))
	mustPrepare(t, d, claim("interrupted", "uid-int", "gpu-1"))
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// The crash: the record says UnprepareStarted, the spec is still there.
	record, _, err := claimcache.Open(cfg.StateDir, cfg.BootID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := record.StartUnprepare("uid-int"); err != nil {
		t.Fatal(err)
	}
	if err := record.Close(); err != nil {
		t.Fatal(err)
	}
	leaked := &cdi.Spec{Version: "0.3.0", Kind: testDriver + "/" + cdi.ClaimClass, Devices: []cdi.Device{{Name: "uid-leaked-gpu-2", ContainerEdits: cdi.ContainerEdits{Env: []string{"A=1"}}}}}
	foreign := &cdi.Spec{Version: "0.3.0", Kind: "other.example.com/" + cdi.ClaimClass, Devices: []cdi.Device{{Name: "x", ContainerEdits: cdi.ContainerEdits{Env: []string{"A=1"}}}}}
	specs := cdi.SpecDir{Path: cfg.CDIDir}
	for _, s := range []*cdi.Spec{leaked, foreign} {
		if _, err := specs.Write(s, "uid-leaked"); err != nil {
			t.Fatal(err)
		}
	}

	d = open(t, cfg)
	for uid, want := range map[string]bool{"uid-kept": true, "uid-int": false, "uid-leaked": false} {
		if _, err := os.Stat(specPath(cfg, uid)); (err == nil) != want {
			t.Errorf("spec of %s: exists %v, want %v", uid, err == nil, want)
		}
	}
	if _, err := os.Stat(filepath.Join(cfg.CDIDir, cdi.TransientSpecFileName("other.example.com", cdi.ClaimClass, "uid-leaked"))); err != nil {
		t.Errorf("another driver's spec was removed: %v", err)
	}
	if got := d.record.Len(); got != 1 {
		t.Errorf("%d claims recorded, want only uid-kept", got)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"driver name", func(c *Config) { c.DriverName = "Not_A_Name" }, `driver name "Not_A_Name"`},
		{"node name", func(c *Config) { c.NodeName = "" }, "node name is empty"},
		{"no devices", func(c *Config) { c.NumDevices = 0 }, "number of devices 0"},
		{"too many devices", func(c *Config) { c.NumDevices = MaxDevices + 1 }, "number of devices 129"},
		{"relative CDI dir", func(c *Config) { c.CDIDir = "cdi" }, `CDI directory "cdi"`},
		{"boot ID", func(c *Config) { c.BootID = " \n" }, "boot ID is empty"},
		{"relative host device node", func(c *Config) { c.HostDeviceNode = "null" }, `host device node "null" is not an absolute path`},
		{"missing host device node", func(c *Config) { c.HostDeviceNode = "/nonexistent/gpu0" }, "/nonexistent/gpu0: no such file"},
		{"host device node is a file", func(c *Config) { c.HostDeviceNode = "/proc/self/status" }, "host device node /proc/self/status is not a character or block device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			tc.change(&cfg)
			_, err := New(context.Background(), cfg)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want ErrInvalidConfig naming %q", err, tc.want)
			}
		})
	}
}

// A record whose directory is locked by a running driver is not opened a
// second time: two drivers on one record would lose each other's writes.
func TestSecondDriverOnSameStateDirRefused(t *testing.T) {
	cfg := testConfig(t)
	open(t, cfg)
	if d, err := New(context.Background(), cfg); err == nil {
		d.Close()
		t.Fatal("a second driver opened the same record")
	}
}

func TestInventory(t *testing.T) {
	cfg := testConfig(t)
	d := open(t, cfg)
	inv := d.Inventory()
	if len(inv.Pools) != 1 || inv.Pools[0].Name != testNode || len(inv.Pools[0].Devices) != cfg.NumDevices {
		t.Fatalf("inventory %+v, want one pool %s with %d devices", inv, testNode, cfg.NumDevices)
	}
	for i, dev := range inv.Pools[0].Devices {
		if dev.Name != deviceName(i) || ptr.Deref(dev.Attributes["index"].IntValue, -1) != int64(i) {
			t.Errorf("device %d: %s index %v", i, dev.Name, dev.Attributes["index"].IntValue)
		}
	}
}

// A crash after recording PrepareStarted (before the spec and the devices
// were recorded): the kubelet's retry finishes the prepare, or its
// unprepare rolls it back.
func TestInterruptedPrepare(t *testing.T) {
	for _, next := range []string{"prepare", "unprepare"} {
		t.Run(next, func(t *testing.T) {
			cfg := testConfig(t)
			c := claim("one", "uid-1", "gpu-1")
			record, _, err := claimcache.Open(cfg.StateDir, cfg.BootID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := record.StartPrepare(claimcache.ClaimRef{Namespace: "ns", Name: "one", UID: "uid-1"}, ""); err != nil {
				t.Fatal(err)
			}
			if err := record.Close(); err != nil {
				t.Fatal(err)
			}
			d := open(t, cfg)
			switch next {
			case "prepare":
				if ids := mustPrepare(t, d, c); !slices.Equal(ids, []string{testDriver + "/claim=uid-1-gpu-1"}) {
					t.Errorf("CDI IDs %v", ids)
				}
				readSpec(t, cfg, "uid-1")
			case "unprepare":
				unprepare(t, d, c)
				if d.record.Len() != 0 {
					t.Errorf("%d claims recorded after the roll back", d.record.Len())
				}
			}
		})
	}
}

func TestEnvName(t *testing.T) {
	for _, tc := range []struct {
		driver string
		i      int
		want   string
	}{
		{"piecemeal.example.com", 3, "GPU_DEVICE_PIECEMEAL_EXAMPLE_COM_3"},
		{"my-gpu2.example.org", 10, "GPU_DEVICE_MY_GPU2_EXAMPLE_ORG_10"},
	} {
		if got := EnvName(tc.driver, tc.i); got != tc.want {
			t.Errorf("EnvName(%q, %d) = %s, want %s", tc.driver, tc.i, got, tc.want)
		}
	}
}
