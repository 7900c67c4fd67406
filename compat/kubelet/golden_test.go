package kubelet

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/dranode/dranode/checkpoint"
	"github.com/dranode/dranode/checkpoint/kubeletcompat"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	dmcheckpoint "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint"
	drastate "k8s.io/kubernetes/pkg/kubelet/cm/dra/state"
)

var update = flag.Bool("update", false, "rewrite the golden files under checkpoint/kubeletcompat/testdata with what the kubelet writes")

// goldenDir is where kubeletcompat keeps the files it is tested against.
const goldenDir = "../../checkpoint/kubeletcompat/testdata"

func draGoldenPath(name string) string {
	return filepath.Join(goldenDir, kubeletcompat.DRAManagerStateFile, name)
}

func deviceManagerGoldenPath(name string) string {
	return filepath.Join(goldenDir, kubeletcompat.DeviceManagerCheckpointFile, name)
}

// writeDRA stores the scenario with the kubelet's DRA checkpointer in a new
// directory and returns the path of the file it wrote.
func writeDRA(t testing.TB, sc draScenario) string {
	t.Helper()
	dir := t.TempDir()
	cp, err := drastate.NewCheckpointer(dir, kubeletcompat.DRAManagerStateFile)
	if err != nil {
		t.Fatal(err)
	}
	if sc.claims == nil {
		if _, err := cp.GetOrCreate(); err != nil {
			t.Fatal(err)
		}
	} else {
		data, err := drastate.NewCheckpoint(sc.claims)
		if err != nil {
			t.Fatal(err)
		}
		if err := cp.Store(data); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, kubeletcompat.DRAManagerStateFile)
}

// writeDeviceManager stores the scenario with the kubelet's device manager
// checkpoint code and returns the path of the file it wrote.
func writeDeviceManager(t testing.TB, sc deviceManagerScenario) string {
	t.Helper()
	dir := t.TempDir()
	if sc.pre120 {
		runV1Writer(t, dir, sc)
	} else {
		manager, err := checkpointmanager.NewCheckpointManager(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := manager.CreateCheckpoint(kubeletcompat.DeviceManagerCheckpointFile, dmcheckpoint.New(sc.entries, sc.registered)); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, kubeletcompat.DeviceManagerCheckpointFile)
}

// pre120Entry is the kubelet's PodDevicesEntryV1 as JSON: the device IDs
// of all NUMA nodes in one list, in NUMA node order.
type pre120Entry struct {
	PodUID, ContainerName, ResourceName string
	DeviceIDs                           []string
	AllocResp                           []byte
}

func flatten(perNUMA dmcheckpoint.DevicesPerNUMA) []string {
	var ids []string
	for _, node := range slices.Sorted(maps.Keys(perNUMA)) {
		ids = append(ids, perNUMA[node]...)
	}
	return ids
}

// runV1Writer runs testdata/v1writer, a separate module on k8s.io/kubernetes
// v1.30 (the v1.37 kubelet no longer has a pre-1.20 writer or reader), which
// writes the file with the kubelet's NewV1 and verifies it with the
// kubelet's v1 checksum code.
func runV1Writer(t testing.TB, dir string, sc deviceManagerScenario) {
	t.Helper()
	spec := struct {
		Entries           []pre120Entry
		RegisteredDevices map[string][]string
	}{RegisteredDevices: sc.registered}
	for _, e := range sc.entries {
		spec.Entries = append(spec.Entries, pre120Entry{e.PodUID, e.ContainerName, e.ResourceName, flatten(e.DeviceIDs), e.AllocResp})
	}
	in, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the pre-1.20 scenarios run the v1.30 kubelet's code with the go tool: %v", err)
	}
	cmd := exec.Command(goTool, "run", ".", dir)
	cmd.Dir = filepath.Join("testdata", "v1writer")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Stdin = bytes.NewReader(in)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("v1writer: %v\n%s", err, out)
	}
}

func checkGolden(t *testing.T, path, golden string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGoldenFiles -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the kubelet now writes\n%s\nbut %s holds\n%s\n(run go test -run TestGoldenFiles -update if the change is expected)", got, golden, want)
	}
}

// TestGoldenFiles regenerates every golden file with the kubelet's code and
// fails when the checked-in copy differs.
func TestGoldenFiles(t *testing.T) {
	for _, sc := range draScenarios() {
		t.Run("dra/"+sc.name, func(t *testing.T) {
			checkGolden(t, writeDRA(t, sc), draGoldenPath(sc.name))
		})
	}
	for _, sc := range deviceManagerScenarios(t) {
		t.Run("devicemanager/"+sc.name, func(t *testing.T) {
			checkGolden(t, writeDeviceManager(t, sc), deviceManagerGoldenPath(sc.name))
		})
	}
}

// TestGoldenFilesAreDeterministic guards the premise of TestGoldenFiles:
// two runs of the kubelet's code over one scenario write the same bytes.
func TestGoldenFilesAreDeterministic(t *testing.T) {
	for _, sc := range draScenarios() {
		a, b := readFile(t, writeDRA(t, sc)), readFile(t, writeDRA(t, sc))
		if !bytes.Equal(a, b) {
			t.Errorf("dra/%s: two runs differ:\n%s\n%s", sc.name, a, b)
		}
	}
	for _, sc := range deviceManagerScenarios(t) {
		if sc.pre120 {
			continue // one process per run; TestGoldenFiles covers it against the checked-in copy
		}
		a, b := readFile(t, writeDeviceManager(t, sc)), readFile(t, writeDeviceManager(t, sc))
		if !bytes.Equal(a, b) {
			t.Errorf("devicemanager/%s: two runs differ:\n%s\n%s", sc.name, a, b)
		}
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// expectedDRA converts kubelet claim state into what kubeletcompat should
// report for it.
func expectedDRA(claims drastate.ClaimInfoStateList) kubeletcompat.DRAManagerState {
	var state kubeletcompat.DRAManagerState
	for _, c := range claims {
		claim := kubeletcompat.DRAClaim{UID: string(c.ClaimUID), Name: c.ClaimName, Namespace: c.Namespace, PodUIDs: sortedOrNil(c.PodUIDs.UnsortedList())}
		if c.DriverState != nil {
			claim.Drivers = map[string]kubeletcompat.DRADriverState{}
		}
		for driver, ds := range c.DriverState {
			var out kubeletcompat.DRADriverState
			for _, op := range ds.SkipNodeOperations {
				out.SkipNodeOperations = append(out.SkipNodeOperations, string(op))
			}
			for _, d := range ds.Devices {
				dev := kubeletcompat.DRADevice{PoolName: d.PoolName, DeviceName: d.DeviceName, RequestNames: d.RequestNames, CDIDeviceIDs: d.CDIDeviceIDs}
				if d.ShareID != nil {
					dev.ShareID = string(*d.ShareID)
				}
				out.Devices = append(out.Devices, dev)
			}
			claim.Drivers[driver] = out
		}
		state.Claims = append(state.Claims, claim)
	}
	return state
}

func sortedOrNil(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	return s
}

func expectedDeviceManager(sc deviceManagerScenario) kubeletcompat.DeviceManagerCheckpoint {
	want := kubeletcompat.DeviceManagerCheckpoint{Format: kubeletcompat.FormatDevicesPerNUMA, RegisteredDevices: sc.registered}
	if sc.pre120 && len(sc.entries) > 0 {
		want.Format = kubeletcompat.FormatDeviceList
	}
	for _, e := range sc.entries {
		perNUMA := map[int64][]string(e.DeviceIDs)
		if sc.pre120 {
			perNUMA = map[int64][]string{0: flatten(e.DeviceIDs)}
		}
		want.Entries = append(want.Entries, kubeletcompat.PodDevices{
			PodUID: e.PodUID, ContainerName: e.ContainerName, ResourceName: e.ResourceName,
			DevicesPerNUMA: perNUMA, AllocResp: e.AllocResp,
		})
	}
	return want
}

// TestReadersAcceptKubeletOutput is the kubelet → dranode direction: what
// the kubelet writes, kubeletcompat reads back to the values the kubelet was
// given.
func TestReadersAcceptKubeletOutput(t *testing.T) {
	for _, sc := range draScenarios() {
		t.Run("dra/"+sc.name, func(t *testing.T) {
			got, err := kubeletcompat.ReadDRAManagerState(writeDRA(t, sc))
			if err != nil {
				t.Fatal(err)
			}
			if want := expectedDRA(sc.claims); !reflect.DeepEqual(got, want) {
				t.Errorf("read\n%+v\nwant\n%+v", got, want)
			}
		})
	}
	for _, sc := range deviceManagerScenarios(t) {
		t.Run("devicemanager/"+sc.name, func(t *testing.T) {
			got, err := kubeletcompat.ReadDeviceManagerCheckpoint(writeDeviceManager(t, sc))
			if err != nil {
				t.Fatal(err)
			}
			if want := expectedDeviceManager(sc); !reflect.DeepEqual(got, want) {
				t.Errorf("read\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

// TestKubeletAcceptsGoldenFiles closes the loop on the checked-in files: the
// kubelet's own readers load them and verify their checksums.
func TestKubeletAcceptsGoldenFiles(t *testing.T) {
	for _, sc := range draScenarios() {
		t.Run("dra/"+sc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyFile(t, draGoldenPath(sc.name), filepath.Join(dir, kubeletcompat.DRAManagerStateFile))
			cp, err := drastate.NewCheckpointer(dir, kubeletcompat.DRAManagerStateFile)
			if err != nil {
				t.Fatal(err)
			}
			got, err := cp.GetOrCreate()
			if err != nil {
				t.Fatal(err)
			}
			list, err := got.GetClaimInfoStateList()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(list, sc.claims) {
				t.Errorf("kubelet read %+v, want %+v", list, sc.claims)
			}
		})
	}
	for _, sc := range deviceManagerScenarios(t) {
		if sc.pre120 {
			continue // the v1.37 kubelet has no pre-1.20 reader; v1writer verified these
		}
		t.Run("devicemanager/"+sc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyFile(t, deviceManagerGoldenPath(sc.name), filepath.Join(dir, kubeletcompat.DeviceManagerCheckpointFile))
			manager, err := checkpointmanager.NewCheckpointManager(dir)
			if err != nil {
				t.Fatal(err)
			}
			cp := dmcheckpoint.New(nil, nil)
			if err := manager.GetCheckpoint(kubeletcompat.DeviceManagerCheckpointFile, cp); err != nil {
				t.Fatal(err)
			}
			entries, registered := cp.GetData()
			if !reflect.DeepEqual(entries, sc.entries) || !reflect.DeepEqual(registered, sc.registered) {
				t.Errorf("kubelet read %+v %v, want %+v %v", entries, registered, sc.entries, sc.registered)
			}
		})
	}
}

// TestKubeletRejectsWhatReadersReject checks the two sides agree on damage:
// a golden file with one byte of its data changed fails the kubelet's
// checksum and kubeletcompat's, the latter as checkpoint.ErrCorrupt.
func TestKubeletRejectsWhatReadersReject(t *testing.T) {
	for _, sc := range draScenarios()[1:] {
		t.Run("dra/"+sc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, kubeletcompat.DRAManagerStateFile)
			data := readFile(t, draGoldenPath(sc.name))
			mutated := bytes.Replace(data, []byte("example.com"), []byte("exampl3.com"), 1)
			if bytes.Equal(mutated, data) {
				t.Fatal("scenario has nothing to damage")
			}
			if err := os.WriteFile(path, mutated, 0o644); err != nil {
				t.Fatal(err)
			}
			cp, err := drastate.NewCheckpointer(dir, kubeletcompat.DRAManagerStateFile)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cp.GetOrCreate(); err == nil {
				t.Error("the kubelet accepted a damaged DRA checkpoint")
			}
			if _, err := kubeletcompat.ReadDRAManagerState(path); !errors.Is(err, checkpoint.ErrCorrupt) || !errors.Is(err, kubeletcompat.ErrChecksumMismatch) {
				t.Errorf("kubeletcompat: %v, want a checksum mismatch matching checkpoint.ErrCorrupt", err)
			}
		})
	}
}

// TestKubeletRejectsWhatReadersRejectDeviceManager is the same for the
// device manager's current layout.
func TestKubeletRejectsWhatReadersRejectDeviceManager(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, kubeletcompat.DeviceManagerCheckpointFile)
	data := readFile(t, deviceManagerGoldenPath("per-numa-several"))
	mutated := bytes.Replace(data, []byte(`"gpu-4"`), []byte(`"gpu-9"`), 1)
	if bytes.Equal(mutated, data) {
		t.Fatal("scenario has nothing to damage")
	}
	if err := os.WriteFile(path, mutated, 0o644); err != nil {
		t.Fatal(err)
	}
	manager, err := checkpointmanager.NewCheckpointManager(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := manager.GetCheckpoint(kubeletcompat.DeviceManagerCheckpointFile, dmcheckpoint.New(nil, nil)); err == nil {
		t.Error("the kubelet accepted a damaged device manager checkpoint")
	}
	if _, err := kubeletcompat.ReadDeviceManagerCheckpoint(path); !errors.Is(err, checkpoint.ErrCorrupt) || !errors.Is(err, kubeletcompat.ErrChecksumMismatch) {
		t.Errorf("kubeletcompat: %v, want a checksum mismatch matching checkpoint.ErrCorrupt", err)
	}
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	if err := os.WriteFile(to, readFile(t, from), 0o644); err != nil {
		t.Fatal(fmt.Errorf("copy %s: %w", from, err))
	}
}
