package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/dranode/dranode/agent/config"
	"github.com/dranode/dranode/pluginmgr/plugintest"
)

// builtBinaries are built once per test run into a shared temp dir.
var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// binaries builds gpu-plugin (examples/gpu) and dranode-agent and returns
// their paths.
func binaries(t testing.TB) (gpuPlugin, agentBin string) {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "dranode-agent-test-bin-")
		if buildErr != nil {
			return
		}
		for _, b := range []struct{ dir, pkg, out string }{
			{"../examples", "./gpu", "gpu-plugin"},
			{".", "./cmd/dranode-agent", "dranode-agent"},
		} {
			if _, buildErr = plugintest.Build(context.Background(), b.dir, b.pkg, filepath.Join(buildDir, b.out)); buildErr != nil {
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "gpu-plugin"), filepath.Join(buildDir, "dranode-agent")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func sha256File(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// testEnv is one agent's directories.
type testEnv struct {
	root, claimsDir, bootIDFile string
	cfg                         config.Config
}

// newTestEnv returns a standalone configuration under a short temp dir
// (unix socket paths are limited to 107 bytes) with one gpu-plugin per
// driver name.
func newTestEnv(t testing.TB, driverNames ...string) *testEnv {
	t.Helper()
	gpu, _ := binaries(t)
	root, err := os.MkdirTemp("", "dra-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	e := &testEnv{root: root, claimsDir: filepath.Join(root, "claims"), bootIDFile: filepath.Join(root, "boot_id")}
	if err := os.MkdirAll(e.claimsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.setBootID(t, "boot-1")
	cfg := config.Default()
	cfg.NodeName = "node-a"
	cfg.StateDir = filepath.Join(root, "state")
	cfg.BootIDFile = e.bootIDFile
	cfg.Kubelet.RegistryDir = filepath.Join(root, "reg")
	cfg.Kubelet.PluginsDir = filepath.Join(root, "plugins")
	cfg.CDI.Dir = filepath.Join(root, "cdi")
	cfg.Claims.Dir = e.claimsDir
	cfg.Slices.DryRunDir = filepath.Join(root, "slices")
	cfg.HTTP.Address = "127.0.0.1:0"
	sum := sha256File(t, gpu)
	for i, name := range driverNames {
		cfg.Plugins.Drivers = append(cfg.Plugins.Drivers, config.Driver{
			Name: fmt.Sprintf("gpu%d", i), Path: gpu, SHA256: sum,
			Config: map[string]any{"driverName": name, "numDevices": 4, "devRoot": filepath.Join(root, "dev", name), "healthPollInterval": "50ms"},
		})
	}
	e.cfg = cfg
	return e
}

func (e *testEnv) setBootID(t testing.TB, id string) {
	t.Helper()
	if err := os.WriteFile(e.bootIDFile, []byte(id+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// start runs an agent in this process on the environment.
func (e *testEnv) start(t testing.TB, opts Options) *Agent {
	t.Helper()
	if opts.Logger.GetSink() == nil {
		opts.Logger = ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))
	}
	if opts.PluginLogger == nil {
		opts.PluginLogger = hclog.NewNullLogger()
	}
	a, err := New(e.cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop() })
	return a
}

// claim is an allocated claim on node with devices "driver:device" (pool
// "pool-a").
func claim(namespace, name, uid, node string, devices ...[2]string) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(uid)},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "req", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu"},
		}}}},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{
			NodeSelector: nodeSelector(node),
		}},
	}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourcev1.DeviceRequestAllocationResult{
			Request: "req", Driver: d[0], Pool: "pool-a", Device: d[1],
		})
	}
	return c
}

func (e *testEnv) writeClaim(t testing.TB, c *resourcev1.ResourceClaim) {
	t.Helper()
	data, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.claimsDir, c.Name+".yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// kubelet talks to the agent's sockets like the kubelet: it finds the DRA
// endpoint through the registration socket.
type kubelet struct {
	info *registerapi.PluginInfo
	conn *grpc.ClientConn
	dra  drapbv1.DRAPluginClient
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
	reg := registerapi.NewRegistrationClient(dial(t, RegistrationSocket(cfg.Kubelet.RegistryDir, driverName)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo on %s: %v", driverName, err)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	conn := dial(t, info.Endpoint)
	return &kubelet{info: info, conn: conn, dra: drapbv1.NewDRAPluginClient(conn)}
}

func (k *kubelet) prepare(t testing.TB, claims ...*resourcev1.ResourceClaim) map[string]*drapbv1.NodePrepareResourceResponse {
	t.Helper()
	req := &drapbv1.NodePrepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, &drapbv1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := k.dra.NodePrepareResources(ctx, req)
	if err != nil {
		t.Fatalf("NodePrepareResources: %v", err)
	}
	return resp.Claims
}

func (k *kubelet) unprepare(t testing.TB, claims ...*resourcev1.ResourceClaim) map[string]*drapbv1.NodeUnprepareResourceResponse {
	t.Helper()
	req := &drapbv1.NodeUnprepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, &drapbv1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := k.dra.NodeUnprepareResources(ctx, req)
	if err != nil {
		t.Fatalf("NodeUnprepareResources: %v", err)
	}
	return resp.Claims
}

// mustPrepared returns the CDI IDs of a successful prepare of c.
func mustPrepared(t testing.TB, resp map[string]*drapbv1.NodePrepareResourceResponse, c *resourcev1.ResourceClaim) []string {
	t.Helper()
	r, ok := resp[string(c.UID)]
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

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
