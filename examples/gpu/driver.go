package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
)

const (
	driverVersion = "v0.1.0"
	configGroup   = "v1"
	configKind    = "GpuConfig"
)

// maxDevices bounds numDevices. The agent splits a pool into ResourceSlices
// of at most 128 devices itself, so the API's per-slice limit does not bound
// a plugin; what does is the inventory travelling to the agent as one gRPC
// message, which the host accepts up to gRPC's default 4 MiB. A simulated
// GPU takes about 200 bytes on that wire (TestMaxDevicesFitOneMessage
// measures it), so 4,096 GPUs take about 0.8 MiB, a fifth of the limit.
const maxDevices = 4096

// errConfig marks a configuration the driver cannot use.
var errConfig = errors.New("invalid gpu plugin configuration")

// duration accepts Go duration strings ("500ms") in JSON.
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"1s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

// defaultHealthPoll: the markers and the host device node are watched
// (markers.go), so the poll only catches a lost watch.
const defaultHealthPoll = time.Minute

// config is the driver's section of the agent configuration.
type config struct {
	DriverName         string   `json:"driverName"`
	NumDevices         *int     `json:"numDevices"`
	DevRoot            string   `json:"devRoot"`
	Model              string   `json:"model"`
	Memory             string   `json:"memory"`
	HealthPollInterval duration `json:"healthPollInterval"`
	// ContainerDevDir is where the device nodes appear in the container.
	ContainerDevDir string `json:"containerDevDir"`
	// HostDeviceNode is the real device node every simulated GPU's
	// container node is made from (its type and major:minor).
	HostDeviceNode string `json:"hostDeviceNode"`
	// StatelessPrepare is what Info reports (pluginmgr.Info): true by
	// default, as Prepare only computes container edits; false makes the
	// agent take the path of a driver that changes the node.
	StatelessPrepare *bool `json:"statelessPrepare"`
	// SharedGPUs publishes that many more GPUs, shared-gpu-0 on, with
	// allowMultipleAllocations: each allocation is a share with its own
	// share ID and memory (consumable capacity).
	SharedGPUs int `json:"sharedGPUs"`
	// PartitionedGPUs publishes that many more GPUs, partitioned-gpu-0 on,
	// each as the whole GPU and Partitions partitions
	// (partitioned-gpu-N-part-M) consuming one counter set, so that the
	// scheduler allocates the whole or partitions of it, never both.
	PartitionedGPUs int `json:"partitionedGPUs"`
	Partitions      int `json:"partitions"`

	memory resource.Quantity
}

// maxPartitions bounds the partitions of a partitioned GPU.
const maxPartitions = 8

// defaultDriverName is the driver name when none is configured; its device
// nodes appear in containers as /dev/gpuN.
const defaultDriverName = "gpu.example.com"

// defaultHostDeviceNode backs every simulated GPU: a character device that
// exists on every Linux host and in every container, harmless to hand to a
// workload, and needs no privilege to name (see doc.go for why not a node
// of our own).
const defaultHostDeviceNode = "/dev/null"

// checkDeviceNode says why path cannot be the host side of a CDI device
// node: a container runtime stats it and refuses anything but a character
// or block device ("not a device node").
func checkDeviceNode(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("hostDeviceNode: %w", err)
	}
	if fi.Mode()&os.ModeDevice == 0 {
		return fmt.Errorf("hostDeviceNode %s is not a character or block device (mode %s)", path, fi.Mode())
	}
	return nil
}

func parseConfig(raw []byte) (config, error) {
	var c config
	if len(bytes.TrimSpace(raw)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return config{}, fmt.Errorf("%w: %v", errConfig, err)
		}
	}
	if c.DriverName == "" {
		c.DriverName = defaultDriverName
	}
	if c.ContainerDevDir == "" {
		// Two instances of the plugin on one node serve different driver
		// names, and a claim may hold devices of both: their gpu0 must
		// not land on the same container path.
		c.ContainerDevDir = "/dev"
		if c.DriverName != defaultDriverName {
			c.ContainerDevDir = "/dev/" + c.DriverName
		}
	}
	if c.NumDevices == nil {
		c.NumDevices = ptr.To(8)
	}
	if c.StatelessPrepare == nil {
		c.StatelessPrepare = ptr.To(true)
	}
	if c.DevRoot == "" {
		c.DevRoot = "/tmp/dranode-gpu/dev"
	}
	if c.HostDeviceNode == "" {
		c.HostDeviceNode = defaultHostDeviceNode
	}
	if c.Model == "" {
		c.Model = "Example GPU 40G"
	}
	if c.Memory == "" {
		c.Memory = "40Gi"
	}
	if c.HealthPollInterval == 0 {
		c.HealthPollInterval = duration(defaultHealthPoll)
	}
	if c.Partitions == 0 {
		c.Partitions = 2
	}
	if err := inventory.ValidateDriverName(c.DriverName); err != nil {
		return config{}, fmt.Errorf("%w: %w", errConfig, err)
	}
	if *c.NumDevices < 0 || *c.NumDevices > maxDevices {
		return config{}, fmt.Errorf("%w: numDevices %d is outside 0..%d", errConfig, *c.NumDevices, maxDevices)
	}
	if c.SharedGPUs < 0 || c.PartitionedGPUs < 0 || *c.NumDevices+c.SharedGPUs+c.PartitionedGPUs*(1+c.Partitions) > maxDevices {
		return config{}, fmt.Errorf("%w: numDevices %d, sharedGPUs %d and partitionedGPUs %d (with %d partitions each) make more than %d devices or are negative",
			errConfig, *c.NumDevices, c.SharedGPUs, c.PartitionedGPUs, c.Partitions, maxDevices)
	}
	if c.Partitions < 2 || c.Partitions > maxPartitions {
		return config{}, fmt.Errorf("%w: partitions %d is outside 2..%d", errConfig, c.Partitions, maxPartitions)
	}
	if !filepath.IsAbs(c.DevRoot) {
		return config{}, fmt.Errorf("%w: devRoot %q must be absolute", errConfig, c.DevRoot)
	}
	if !filepath.IsAbs(c.HostDeviceNode) {
		return config{}, fmt.Errorf("%w: hostDeviceNode %q must be absolute", errConfig, c.HostDeviceNode)
	}
	if !filepath.IsAbs(c.ContainerDevDir) || filepath.Clean(c.ContainerDevDir) != c.ContainerDevDir {
		return config{}, fmt.Errorf("%w: containerDevDir %q must be an absolute, clean path", errConfig, c.ContainerDevDir)
	}
	// The model is published as a string attribute.
	if len(c.Model) > resourcev1.DeviceAttributeMaxValueLength {
		return config{}, fmt.Errorf("%w: model %q is longer than %d characters", errConfig, c.Model, resourcev1.DeviceAttributeMaxValueLength)
	}
	q, err := resource.ParseQuantity(c.Memory)
	if err != nil || q.Sign() <= 0 {
		return config{}, fmt.Errorf("%w: memory %q is not a positive quantity", errConfig, c.Memory)
	}
	if q.Value()%int64(c.Partitions) != 0 && c.PartitionedGPUs > 0 {
		return config{}, fmt.Errorf("%w: memory %s is not divisible into %d partitions", errConfig, c.Memory, c.Partitions)
	}
	c.memory = q
	if c.HealthPollInterval < 0 {
		return config{}, fmt.Errorf("%w: healthPollInterval must be positive", errConfig)
	}
	return c, nil
}

// driver simulates GPUs. It keeps no state about claims: Prepare is a pure
// function of the claim and the configuration, so it is idempotent and
// Unprepare has nothing to undo.
type driver struct {
	log hclog.Logger

	mu         sync.Mutex
	cfg        config
	nodeName   string // the agent's node; names the driver's one pool
	configured chan struct{}
}

func newDriver(log hclog.Logger) *driver {
	return &driver{log: log, configured: make(chan struct{})}
}

func (d *driver) config() config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}

func (d *driver) Info(ctx context.Context) (pluginmgr.Info, error) {
	cfg, err := d.waitConfigured(ctx)
	if err != nil {
		return pluginmgr.Info{}, err
	}
	return pluginmgr.Info{
		DriverName:        cfg.DriverName,
		DriverVersion:     driverVersion,
		Health:            true,
		OpaqueConfigKinds: []string{cfg.DriverName + "/" + configGroup + "/" + configKind},
		StatelessPrepare:  *cfg.StatelessPrepare,
	}, nil
}

func (d *driver) Configure(_ context.Context, nodeName string, raw []byte) error {
	cfg, err := parseConfig(raw)
	if err != nil {
		return err
	}
	if err := checkDeviceNode(cfg.HostDeviceNode); err != nil {
		return fmt.Errorf("%w: %w", errConfig, err)
	}
	// devRoot holds the health markers only; made here so that marking a
	// GPU is one touch.
	if err := os.MkdirAll(cfg.DevRoot, 0o755); err != nil {
		return fmt.Errorf("devRoot: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.configured:
		return errors.New("configured twice")
	default:
	}
	d.cfg = cfg
	d.nodeName = nodeName
	close(d.configured)
	d.log.Info("configured", "node", nodeName, "driver", cfg.DriverName, "devices", *cfg.NumDevices, "devRoot", cfg.DevRoot, "hostDeviceNode", cfg.HostDeviceNode)
	return nil
}

func deviceName(i int) string { return "gpu-" + strconv.Itoa(i) }

// markerPath is the file whose existence marks GPU i unhealthy.
func markerPath(cfg config, i int) string {
	return filepath.Join(cfg.DevRoot, "gpu"+strconv.Itoa(i)+".unhealthy")
}

// envPrefix names GPU i's environment variables, per driver so that a
// container with devices of two instances of the plugin gets both:
// GPU_DEVICE_<driver name in upper case, every character other than a
// letter or digit as "_">_<i>, e.g. GPU_DEVICE_GPU_EXAMPLE_COM_0.
func envPrefix(driverName string, i int) string {
	return "GPU_DEVICE_" + envWord(driverName) + "_" + strconv.Itoa(i)
}

// envWord is s in upper case with every character other than a letter or
// digit as "_", for a variable name.
func envWord(s string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(s) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// simulated is what Prepare needs of one published device.
type simulated struct {
	uuid   string
	env    string // its variables' prefix
	path   string // its device node in the container
	marker string // the file that marks it unhealthy; "" for none
}

// lookupDevice finds a published device by name: gpu-N (variables
// GPU_DEVICE_<DRIVER>_N, node gpuN), shared-gpu-N (..._SHARED_N,
// shared-gpuN), partitioned-gpu-N (..._PARTITIONED_N, partitioned-gpuN)
// and its partitions partitioned-gpu-N-part-M (..._PARTITIONED_N_PART_M,
// partitioned-gpuN-partM). Only gpu-N have health markers.
func lookupDevice(cfg config, name string) (simulated, bool) {
	index := func(s string, n int) (int, bool) {
		i, err := strconv.Atoi(s)
		return i, err == nil && i >= 0 && i < n && strconv.Itoa(i) == s
	}
	prefix := "GPU_DEVICE_" + envWord(cfg.DriverName) + "_"
	if rest, ok := strings.CutPrefix(name, "gpu-"); ok {
		i, ok := index(rest, *cfg.NumDevices)
		return simulated{uuid: deviceUUID(cfg.DriverName, i), env: envPrefix(cfg.DriverName, i), path: containerPath(cfg, i), marker: markerPath(cfg, i)}, ok
	}
	if rest, ok := strings.CutPrefix(name, "shared-gpu-"); ok {
		_, ok := index(rest, cfg.SharedGPUs)
		return simulated{uuid: uuidOf(cfg.DriverName, name), env: prefix + "SHARED_" + rest, path: filepath.Join(cfg.ContainerDevDir, "shared-gpu"+rest)}, ok
	}
	if rest, ok := strings.CutPrefix(name, "partitioned-gpu-"); ok {
		gpu, part, isPart := strings.Cut(rest, "-part-")
		if _, ok := index(gpu, cfg.PartitionedGPUs); !ok {
			return simulated{}, false
		}
		dev := simulated{uuid: uuidOf(cfg.DriverName, name), env: prefix + "PARTITIONED_" + gpu, path: filepath.Join(cfg.ContainerDevDir, "partitioned-gpu"+gpu)}
		if isPart {
			if _, ok := index(part, cfg.Partitions); !ok {
				return simulated{}, false
			}
			dev.env += "_PART_" + part
			dev.path += "-part" + part
		}
		return dev, true
	}
	return simulated{}, false
}

// containerPath is where GPU i's device node appears in the container.
func containerPath(cfg config, i int) string {
	return filepath.Join(cfg.ContainerDevDir, "gpu"+strconv.Itoa(i))
}

// deviceUUID is GPU i's UUID, stable across restarts and nodes for one
// driver and index, the way a real GPU's UUID is stable across reboots.
func deviceUUID(driverName string, i int) string { return uuidOf(driverName, strconv.Itoa(i)) }

// uuidOf is the UUID of the device with the given key (a GPU's index,
// another device's name).
func uuidOf(driverName, key string) string {
	sum := sha256.Sum256([]byte(driverName + "/" + key))
	h := fmt.Sprintf("%x", sum[:16])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// buildInventory is the simulated GPUs of cfg, in one pool named after the node.
func buildInventory(cfg config, nodeName string) inventory.Inventory {
	pool := inventory.Pool{Name: nodeName}
	for i := range *cfg.NumDevices {
		pool.Devices = append(pool.Devices, gpuDevice(cfg, deviceName(i), deviceUUID(cfg.DriverName, i), i, cfg.memory))
	}
	for i := range cfg.SharedGPUs {
		pool.Devices = append(pool.Devices, sharedDevice(cfg, i))
	}
	for i := range cfg.PartitionedGPUs {
		set, devices := partitionedDevices(cfg, i)
		pool.SharedCounters = append(pool.SharedCounters, set)
		pool.Devices = append(pool.Devices, devices...)
	}
	return inventory.Inventory{Pools: []inventory.Pool{pool}}
}

// gpuDevice is a simulated GPU's device with its attributes and memory.
func gpuDevice(cfg config, name, uuid string, index int, memory resource.Quantity) resourcev1.Device {
	return resourcev1.Device{
		Name: name,
		Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"model":         {StringValue: ptr.To(cfg.Model)},
			"uuid":          {StringValue: ptr.To(uuid)},
			"index":         {IntValue: ptr.To(int64(index))},
			"driverVersion": {VersionValue: ptr.To(strings.TrimPrefix(driverVersion, "v"))},
		},
		Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
			"memory": {Value: memory},
		},
	}
}

// sharedDevice is shared GPU i: allocated any number of times, each
// allocation a share of its memory, a quarter of it unless the request
// asks for more, in whole quarters (consumable capacity, KEP-5075: beta and
// on by default in Kubernetes 1.36; alpha and off in 1.34 and 1.35, whose
// API servers store the device without allowMultipleAllocations and the
// policy, which the agent reports as dropped fields).
func sharedDevice(cfg config, i int) resourcev1.Device {
	name := "shared-gpu-" + strconv.Itoa(i)
	d := gpuDevice(cfg, name, uuidOf(cfg.DriverName, name), i, cfg.memory)
	d.AllowMultipleAllocations = ptr.To(true)
	if quarter := cfg.memory.Value() / 4; quarter > 0 {
		q := *resource.NewQuantity(quarter, resource.BinarySI)
		d.Capacity["memory"] = resourcev1.DeviceCapacity{Value: cfg.memory, RequestPolicy: &resourcev1.CapacityRequestPolicy{
			Default: &q, ValidRange: &resourcev1.CapacityRequestPolicyRange{Min: &q, Step: &q},
		}}
	}
	return d
}

// partitionedDevices is partitioned GPU i (KEP-4815, partitionable
// devices: beta and on by default in Kubernetes 1.36; alpha and off in 1.34
// and 1.35): a counter set of its memory, the whole GPU consuming all of
// it, and cfg.Partitions partitions consuming an equal part each.
func partitionedDevices(cfg config, i int) (resourcev1.CounterSet, []resourcev1.Device) {
	name := "partitioned-gpu-" + strconv.Itoa(i)
	consume := func(q resource.Quantity) []resourcev1.DeviceCounterConsumption {
		return []resourcev1.DeviceCounterConsumption{{CounterSet: name, Counters: map[string]resourcev1.Counter{"memory": {Value: q}}}}
	}
	whole := gpuDevice(cfg, name, uuidOf(cfg.DriverName, name), i, cfg.memory)
	whole.ConsumesCounters = consume(cfg.memory)
	devices := []resourcev1.Device{whole}
	part := *resource.NewQuantity(cfg.memory.Value()/int64(cfg.Partitions), resource.BinarySI)
	for m := range cfg.Partitions {
		pname := name + "-part-" + strconv.Itoa(m)
		d := gpuDevice(cfg, pname, uuidOf(cfg.DriverName, pname), i, part)
		d.Attributes["partition"] = resourcev1.DeviceAttribute{IntValue: ptr.To(int64(m))}
		d.ConsumesCounters = consume(part)
		devices = append(devices, d)
	}
	return resourcev1.CounterSet{Name: name, Counters: map[string]resourcev1.Counter{"memory": {Value: cfg.memory}}}, devices
}

func (d *driver) waitConfigured(ctx context.Context) (config, error) {
	select {
	case <-d.configured:
		return d.config(), nil
	case <-ctx.Done():
		return config{}, ctx.Err()
	}
}

func (d *driver) WatchDevices(ctx context.Context, send func(inventory.Inventory) error) error {
	cfg, err := d.waitConfigured(ctx)
	if err != nil {
		return err
	}
	// The simulated inventory never changes after Configure.
	if err := send(buildInventory(cfg, d.poolName())); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// poolName is the node's pool: one pool per node, named after the node the
// agent configured (a node name is a DNS subdomain, as a pool name must be).
// Only a driver configured without a node name, which the agent never does,
// falls back to "node".
func (d *driver) poolName() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.nodeName == "" || len(validation.IsDNS1123Subdomain(d.nodeName)) > 0 {
		return "node"
	}
	return d.nodeName
}

func healthSnapshot(cfg config, pool string) []pluginmgr.DeviceHealth {
	out := make([]pluginmgr.DeviceHealth, *cfg.NumDevices)
	// A runtime would refuse every GPU's device node now.
	nodeErr := checkDeviceNode(cfg.HostDeviceNode)
	for i := range out {
		out[i] = pluginmgr.DeviceHealth{Pool: pool, Device: deviceName(i), Status: pluginmgr.Healthy}
		if _, err := os.Stat(markerPath(cfg, i)); err == nil {
			out[i].Status = pluginmgr.Unhealthy
			out[i].Message = "marked unhealthy by " + markerPath(cfg, i)
		} else if nodeErr != nil {
			out[i].Status = pluginmgr.Unhealthy
			out[i].Message = nodeErr.Error()
		}
	}
	return out
}

func (d *driver) WatchHealth(ctx context.Context, send func([]pluginmgr.DeviceHealth) error) error {
	cfg, err := d.waitConfigured(ctx)
	if err != nil {
		return err
	}
	pool := d.poolName()
	var last []pluginmgr.DeviceHealth
	// Markers and the host device node are seen when they change (inotify
	// on their directories); the poll is for what no watch shows: a
	// watched directory itself removed and made again.
	var changes <-chan struct{}
	w, err := watchDirs(cfg.DevRoot, filepath.Dir(cfg.HostDeviceNode))
	if err != nil {
		// The markers alone, rather than nothing, when the device node's
		// directory cannot be watched: the poll still sees the node.
		d.log.Warn("cannot watch the markers' and the host device node's directories together; trying the markers' alone, the poll sees the node", "every", time.Duration(cfg.HealthPollInterval).String(), "error", err)
		w, err = watchDirs(cfg.DevRoot)
	}
	if err != nil {
		d.log.Warn("cannot watch the health markers and the host device node; polling them only", "every", time.Duration(cfg.HealthPollInterval).String(), "error", err)
	} else {
		defer w.Close()
		changes = w.C
	}
	ticker := time.NewTicker(time.Duration(cfg.HealthPollInterval))
	defer ticker.Stop()
	for {
		if snap := healthSnapshot(cfg, pool); !reflect.DeepEqual(snap, last) {
			if err := send(snap); err != nil {
				return err
			}
			last = snap
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case _, ok := <-changes:
			if !ok {
				changes = nil
			}
		}
	}
}

// gpuConfig is the opaque configuration of kind GpuConfig.
type gpuConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Sharing    *struct {
		Strategy    string `json:"strategy"`
		TimeSlicing *struct {
			Interval string `json:"interval"`
		} `json:"timeSlicing"`
	} `json:"sharing"`
}

var timeSliceIntervals = []string{"Default", "Short", "Medium", "Long"}

// sharingEnv decodes one opaque configuration into the environment it adds
// to the device whose variables start with prefix.
func sharingEnv(driverName, prefix string, raw []byte) ([]string, error) {
	var gc gpuConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&gc); err != nil {
		return nil, fmt.Errorf("opaque config: %w", err)
	}
	if want := driverName + "/" + configGroup; gc.APIVersion != want && gc.APIVersion != "gpu.example.com/"+configGroup || gc.Kind != configKind {
		return nil, fmt.Errorf("opaque config: apiVersion %q kind %q, want %s/%s %s", gc.APIVersion, gc.Kind, driverName, configGroup, configKind)
	}
	if gc.Sharing == nil {
		return nil, nil
	}
	switch gc.Sharing.Strategy {
	case "TimeSlicing":
		interval := "Default"
		if gc.Sharing.TimeSlicing != nil && gc.Sharing.TimeSlicing.Interval != "" {
			interval = gc.Sharing.TimeSlicing.Interval
		}
		if !slices.Contains(timeSliceIntervals, interval) {
			return nil, fmt.Errorf("opaque config: time-slicing interval %q is not one of %v", interval, timeSliceIntervals)
		}
		return []string{prefix + "_SHARING_STRATEGY=TimeSlicing", prefix + "_TIMESLICE_INTERVAL=" + interval}, nil
	default:
		return nil, fmt.Errorf("opaque config: sharing strategy %q is not supported (TimeSlicing is)", gc.Sharing.Strategy)
	}
}

func (d *driver) Prepare(ctx context.Context, claims []pluginmgr.Claim) ([]pluginmgr.PrepareResult, error) {
	cfg, err := d.waitConfigured(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]pluginmgr.PrepareResult, len(claims))
	for i, c := range claims {
		devices, err := prepareClaim(cfg, c)
		out[i] = pluginmgr.PrepareResult{ClaimUID: c.UID, Devices: devices, Err: err}
		if err != nil {
			out[i].Devices = nil
			d.log.Warn("prepare failed", "claim", c.UID, "error", err)
		}
	}
	return out, nil
}

func prepareClaim(cfg config, c pluginmgr.Claim) ([]pluginmgr.PreparedDevice, error) {
	if err := checkDeviceNode(cfg.HostDeviceNode); err != nil {
		// The runtime would refuse the container; say why here instead.
		return nil, err
	}
	var devices []pluginmgr.PreparedDevice
	for _, r := range c.Results {
		if r.Driver != cfg.DriverName {
			continue
		}
		dev, ok := lookupDevice(cfg, r.Device)
		if !ok {
			return nil, fmt.Errorf("device %q is not one of this driver's devices (%d GPUs, %d shared, %d partitioned)", r.Device, *cfg.NumDevices, cfg.SharedGPUs, cfg.PartitionedGPUs)
		}
		if dev.marker != "" {
			if _, err := os.Stat(dev.marker); err == nil {
				return nil, fmt.Errorf("device %s is unhealthy", r.Device)
			}
		}
		prefix := dev.env
		env := []string{prefix + "=" + dev.uuid}
		if pluginmgr.AdminAccess(r) {
			// Monitoring access next to the device's owner: the workload
			// is told, and nothing about the GPU is set up for it.
			env = append(env, prefix+"_ACCESS=monitor")
		}
		share := pluginmgr.ShareID(r)
		if share != "" {
			memory := "default"
			if q, ok := r.ConsumedCapacity["memory"]; ok {
				memory = q.String()
			}
			env = append(env, prefix+"_SHARE_"+envWord(share)+"="+memory)
		}
		// Later configurations override earlier ones (claim after class).
		var sharing []string
		for _, dc := range c.Configs {
			if dc.Opaque == nil || dc.Opaque.Driver != cfg.DriverName {
				continue
			}
			if len(dc.Requests) > 0 && !slices.Contains(dc.Requests, r.Request) && !slices.Contains(dc.Requests, parentRequest(r.Request)) {
				continue
			}
			e, err := sharingEnv(cfg.DriverName, prefix, dc.Opaque.Parameters.Raw)
			if err != nil {
				return nil, fmt.Errorf("device %s: %w", r.Device, err)
			}
			if e != nil {
				sharing = e
			}
		}
		env = append(env, sharing...)
		devices = append(devices, pluginmgr.PreparedDevice{
			Pool: r.Pool, Device: r.Device, Requests: []string{r.Request}, ShareID: share,
			Edits: pluginmgr.ContainerEdits{
				Env: env,
				DeviceNodes: []pluginmgr.DeviceNode{{
					Path: dev.path, HostPath: cfg.HostDeviceNode,
				}},
			},
			Status: deviceStatus(cfg, dev.uuid),
		})
	}
	if len(devices) == 0 {
		return nil, fmt.Errorf("claim %s/%s has no devices of driver %s", c.Namespace, c.Name, cfg.DriverName)
	}
	return devices, nil
}

// statusData is the opaque data of a prepared GPU's status in the claim.
type statusData struct {
	UUID  string `json:"uuid"`
	Model string `json:"model"`
}

// deviceStatus is what the agent publishes for a prepared GPU in the
// claim's status.devices: Ready, with its UUID and model, which a user
// reads with kubectl instead of from inside the container.
func deviceStatus(cfg config, uuid string) *resourcev1.AllocatedDeviceStatus {
	data, _ := json.Marshal(statusData{UUID: uuid, Model: cfg.Model}) // strings only: cannot fail
	return &resourcev1.AllocatedDeviceStatus{
		Conditions: []metav1.Condition{{
			Type: "Ready", Status: metav1.ConditionTrue, Reason: "Prepared",
			Message: "the GPU is prepared for the claim", LastTransitionTime: metav1.Now(),
		}},
		Data: &runtime.RawExtension{Raw: data},
	}
}

// parentRequest maps "request/subrequest" (prioritized lists) to "request":
// a config for the parent applies to every subrequest.
func parentRequest(request string) string {
	parent, _, _ := strings.Cut(request, "/")
	return parent
}

func (d *driver) Unprepare(_ context.Context, claims []pluginmgr.PreparedClaim) ([]pluginmgr.UnprepareResult, error) {
	out := make([]pluginmgr.UnprepareResult, len(claims))
	for i, c := range claims {
		// Nothing to undo: the simulation holds no per-claim state.
		out[i] = pluginmgr.UnprepareResult{ClaimUID: c.UID}
	}
	return out, nil
}
