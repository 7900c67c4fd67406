package agent_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/dranode/dranode/agent"
	"github.com/dranode/dranode/agent/config"
	"github.com/dranode/dranode/pluginmgr/plugintest"
)

const (
	gpuDriver = "gpu.example.com"
	nodeName  = "node-a"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// gpuPlugin builds the example driver plugin (examples/gpu) once per test
// run, as a vendor builds its plugin: in its own module, workspace off.
func gpuPlugin(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "dranode-integration-agent-")
		if buildErr != nil {
			return
		}
		_, buildErr = plugintest.Build(context.Background(), filepath.Join("..", "..", "examples"), "./gpu", filepath.Join(buildDir, "gpu-plugin"))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "gpu-plugin")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// nodeConfig lays out one node's directories under a short temp dir (unix
// socket paths are limited to 107 bytes) with one gpu-plugin serving
// gpuDriver with 4 devices.
func nodeConfig(t testing.TB) config.Config {
	t.Helper()
	plugin := gpuPlugin(t)
	data, err := os.ReadFile(plugin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	root, err := os.MkdirTemp("", "dra-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	bootID := filepath.Join(root, "boot_id")
	if err := os.WriteFile(bootID, []byte("boot-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.NodeName = nodeName
	cfg.StateDir = filepath.Join(root, "state")
	cfg.BootIDFile = bootID
	cfg.Kubelet.RegistryDir = filepath.Join(root, "reg")
	cfg.Kubelet.PluginsDir = filepath.Join(root, "plugins")
	cfg.CDI.Dir = filepath.Join(root, "cdi")
	// Used only standalone, but the configuration names them either way.
	cfg.Claims.Dir = filepath.Join(root, "claims")
	cfg.Slices.DryRunDir = filepath.Join(root, "slices")
	cfg.HTTP.Address = "" // the test reads the metrics from the registry
	cfg.Plugins.Drivers = []config.Driver{{
		Name: "gpu", Path: plugin, SHA256: hex.EncodeToString(sum[:]),
		Config: map[string]any{"driverName": gpuDriver, "numDevices": 4, "devRoot": filepath.Join(root, "dev")},
	}}
	return cfg
}

// start runs an agent in this process until the test ends.
func start(t testing.TB, cfg config.Config, opts agent.Options) *agent.Agent {
	t.Helper()
	opts.Logger = ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))
	opts.PluginLogger = hclog.NewNullLogger()
	a, err := agent.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop() })
	return a
}

// gauge is the value of an unlabelled gauge in reg.
func gauge(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s among the agent's metrics", name)
	return 0
}

// allocated is an allocated claim of gpuDriver's device in pool "pool-a",
// pinned to nodeName as the scheduler pins node-local devices.
func allocated(namespace, name, device string) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "req", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu"},
		}}}},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{
			NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}},
			}}},
			Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
				Request: "req", Driver: gpuDriver, Pool: "pool-a", Device: device,
			}}},
		}},
	}
}

// kubelet calls the agent's sockets as the kubelet does: it finds the DRA
// endpoint through the registration socket.
type kubelet struct {
	dra drapbv1.DRAPluginClient
}

func dial(t testing.TB, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func connectKubelet(t testing.TB, cfg config.Config, driverName string) *kubelet {
	t.Helper()
	reg := registerapi.NewRegistrationClient(dial(t, agent.RegistrationSocket(cfg.Kubelet.RegistryDir, driverName)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo on %s: %v", driverName, err)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	return &kubelet{dra: drapbv1.NewDRAPluginClient(dial(t, info.Endpoint))}
}

func kubeletClaim(c *resourcev1.ResourceClaim) *drapbv1.Claim {
	return &drapbv1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}
}

// prepare returns the CDI IDs of a successful prepare of c.
func (k *kubelet) prepare(t testing.TB, c *resourcev1.ResourceClaim) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := k.dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{kubeletClaim(c)}})
	if err != nil {
		t.Fatalf("NodePrepareResources: %v", err)
	}
	r, ok := resp.Claims[string(c.UID)]
	if !ok {
		t.Fatalf("no result for claim %s", c.UID)
	}
	if r.Error != "" {
		t.Fatalf("prepare of %s/%s failed: %s", c.Namespace, c.Name, r.Error)
	}
	var ids []string
	for _, d := range r.Devices {
		ids = append(ids, d.CdiDeviceIds...)
	}
	return ids
}

// unprepare returns the claim's error, "" for success.
func (k *kubelet) unprepare(t testing.TB, c *resourcev1.ResourceClaim) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := k.dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{kubeletClaim(c)}})
	if err != nil {
		t.Fatalf("NodeUnprepareResources: %v", err)
	}
	r, ok := resp.Claims[string(c.UID)]
	if !ok {
		t.Fatalf("no result for claim %s", c.UID)
	}
	return r.Error
}
