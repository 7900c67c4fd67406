package drabench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager/checksum"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// The example driver is dra-example-driver's kubelet plugin as vendors
// copy it, rebuilt here from its design because the module is not served
// by the Go module proxy: the upstream kubeletplugin helper with its
// defaults (calls serialized), one mutex around every prepare and
// unprepare, the kubelet's checkpointmanager as the record (read, then
// written whole after the CDI spec: "checkpoint, prepare, CDI,
// checkpoint"), and the CDI spec written through the reference CDI
// library's cache (tags.cncf.io/container-device-interface, auto-refresh
// on as the example leaves it). It is the comparator the figures
// were taken against; the piecemeal driver (kindUpstream) is the other
// one, which shares dranode's record and CDI code with the agent. Its
// slices are published by the benchmark, as the null driver's are. It is
// this test binary, started again with exampleDriverEnv set.
const (
	exampleDriverEnv = "DRABENCH_EXAMPLE_DRIVER" // the driver name
	exampleNodeEnv   = "DRABENCH_EXAMPLE_NODE"
	exampleRegEnv    = "DRABENCH_EXAMPLE_REGISTRY_DIR"
	examplePlugEnv   = "DRABENCH_EXAMPLE_PLUGINS_DIR"
	exampleStateEnv  = "DRABENCH_EXAMPLE_STATE_DIR"
	exampleCDIEnv    = "DRABENCH_EXAMPLE_CDI_DIR"
	exampleKubeEnv   = "DRABENCH_EXAMPLE_KUBECONFIG"
)

const exampleCheckpointFile = "checkpoint.json"

func runExampleDriver() int {
	if err := serveExample(); err != nil {
		fmt.Fprintln(os.Stderr, "example driver:", err)
		return 1
	}
	return 0
}

func serveExample() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	driverName, node := os.Getenv(exampleDriverEnv), os.Getenv(exampleNodeEnv)
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv(exampleKubeEnv))
	if err != nil {
		return err
	}
	// The client limits of the other two drivers (50 QPS, burst 100), not
	// client-go's defaults (5 and 10): with those, one claim GET in five
	// waited 200 ms for the rate limiter, and the comparison would be
	// about that.
	rc.QPS, rc.Burst = 50, 100
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	d, err := newExampleDriver(driverName, os.Getenv(exampleStateEnv), os.Getenv(exampleCDIEnv))
	if err != nil {
		return err
	}
	dataDir := filepath.Join(os.Getenv(examplePlugEnv), driverName)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return err
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(driverName),
		kubeletplugin.NodeName(node),
		kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrarDirectoryPath(os.Getenv(exampleRegEnv)),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		return err
	}
	defer helper.Stop()
	fmt.Println("example driver serving", driverName)
	<-ctx.Done()
	return nil
}

type exampleDriver struct {
	driver string
	// mu is the example's DeviceState lock: held for a whole prepare or
	// unprepare.
	mu          sync.Mutex
	checkpoints checkpointmanager.CheckpointManager
	cdi         *cdiapi.Cache
}

func newExampleDriver(driver, stateDir, cdiDir string) (*exampleDriver, error) {
	for _, dir := range []string{stateDir, cdiDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, err
		}
	}
	cm, err := checkpointmanager.NewCheckpointManager(stateDir)
	if err != nil {
		return nil, err
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(cdiDir))
	if err != nil {
		return nil, err
	}
	d := &exampleDriver{driver: driver, checkpoints: cm, cdi: cache}
	// The example creates an empty checkpoint when there is none.
	if err := d.checkpoints.GetCheckpoint(exampleCheckpointFile, &exampleCheckpoint{}); err != nil {
		if err := d.checkpoints.CreateCheckpoint(exampleCheckpointFile, &exampleCheckpoint{PreparedClaims: map[string][]kubeletplugin.Device{}}); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func (d *exampleDriver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		devices, err := d.prepare(c)
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
	}
	return out, nil
}

func (d *exampleDriver) prepare(claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	uid := string(claim.UID)
	cp := &exampleCheckpoint{}
	if err := d.checkpoints.GetCheckpoint(exampleCheckpointFile, cp); err != nil {
		return nil, fmt.Errorf("unable to sync from checkpoint: %w", err)
	}
	if devices, ok := cp.PreparedClaims[uid]; ok {
		return devices, nil
	}
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s not allocated", uid)
	}
	spec := &cdispec.Spec{Version: cdispec.CurrentVersion, Kind: d.driver + "/claim"}
	var devices []kubeletplugin.Device
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != d.driver {
			continue
		}
		name := uid + "-" + r.Device
		spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: cdispec.ContainerEdits{
			Env: []string{"GPU_DEVICE_" + r.Device + "=" + uid},
		}})
		devices = append(devices, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
			CDIDeviceIDs: []string{d.driver + "/claim=" + name}})
	}
	specName, err := cdiapi.GenerateNameForTransientSpec(spec, uid)
	if err != nil {
		return nil, err
	}
	if err := d.cdi.WriteSpec(spec, specName); err != nil {
		return nil, fmt.Errorf("unable to write CDI spec: %w", err)
	}
	cp.PreparedClaims[uid] = devices
	if err := d.checkpoints.CreateCheckpoint(exampleCheckpointFile, cp); err != nil {
		return nil, fmt.Errorf("unable to sync to checkpoint: %w", err)
	}
	return devices, nil
}

func (d *exampleDriver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = d.unprepare(string(c.UID))
	}
	return out, nil
}

func (d *exampleDriver) unprepare(uid string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp := &exampleCheckpoint{}
	if err := d.checkpoints.GetCheckpoint(exampleCheckpointFile, cp); err != nil {
		return fmt.Errorf("unable to sync from checkpoint: %w", err)
	}
	devices, ok := cp.PreparedClaims[uid]
	if !ok {
		return nil
	}
	spec := &cdispec.Spec{Kind: d.driver + "/claim"}
	for _, dev := range devices {
		spec.Devices = append(spec.Devices, cdispec.Device{Name: uid + "-" + dev.DeviceName})
	}
	specName, err := cdiapi.GenerateNameForTransientSpec(spec, uid)
	if err != nil {
		return err
	}
	if err := d.cdi.RemoveSpec(specName); err != nil {
		return fmt.Errorf("unable to remove CDI spec: %w", err)
	}
	delete(cp.PreparedClaims, uid)
	if err := d.checkpoints.CreateCheckpoint(exampleCheckpointFile, cp); err != nil {
		return fmt.Errorf("unable to sync to checkpoint: %w", err)
	}
	return nil
}

func (d *exampleDriver) HandleError(_ context.Context, err error, msg string) {
	fmt.Fprintln(os.Stderr, "example driver:", msg+":", err)
}

// WatchHealthStatus: the example reports no health here; the helper's
// health service is off, so the kubelet never asks.
func (d *exampleDriver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// exampleCheckpoint is the example's checkpoint: the prepared claims'
// devices, with the kubelet's checksum over the JSON.
type exampleCheckpoint struct {
	Checksum       checksum.Checksum                 `json:"checksum"`
	PreparedClaims map[string][]kubeletplugin.Device `json:"preparedClaims"`
}

func (c *exampleCheckpoint) MarshalCheckpoint() ([]byte, error) {
	c.Checksum = 0
	out, err := json.Marshal(*c)
	if err != nil {
		return nil, err
	}
	c.Checksum = checksum.New(out)
	return json.Marshal(*c)
}

func (c *exampleCheckpoint) UnmarshalCheckpoint(data []byte) error { return json.Unmarshal(data, c) }

func (c *exampleCheckpoint) VerifyChecksum() error {
	ck := c.Checksum
	c.Checksum = 0
	defer func() { c.Checksum = ck }()
	out, err := json.Marshal(*c)
	if err != nil {
		return err
	}
	return ck.Verify(out)
}
