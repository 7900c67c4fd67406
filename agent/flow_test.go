package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/dranode/dranode/agent/config"
	"github.com/dranode/dranode/cdi"
	"github.com/dranode/dranode/claimcache"
)

func nodeSelector(node string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}}}
}

const gpuDriver = "gpu.example.com"

func specPath(cfg config.Config, driver, uid string) string {
	return filepath.Join(cfg.CDI.Dir, cdi.TransientSpecFileName(driver, cdi.ClaimClass, uid))
}

func readSpec(t *testing.T, path string) *cdi.Spec {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("CDI spec: %v", err)
	}
	s, err := cdi.DecodeSpec(data)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestRegistrationInfo(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	e.start(t, Options{})
	k := connectKubelet(t, e.cfg, gpuDriver)
	if k.info.Type != registerapi.DRAPlugin || k.info.Name != gpuDriver {
		t.Errorf("GetInfo = type %q name %q, want %q %q", k.info.Type, k.info.Name, registerapi.DRAPlugin, gpuDriver)
	}
	if want := DRASocket(e.cfg.Kubelet.PluginsDir, gpuDriver); k.info.Endpoint != want {
		t.Errorf("endpoint %q, want %q", k.info.Endpoint, want)
	}
	// The kubelet picks the first service it knows; v1 must come first, and
	// health must be announced because gpu-plugin reports health.
	want := []string{drapbv1.DRAPluginService, drapbv1beta1.DRAPluginService, drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService}
	if !slices.Equal(k.info.SupportedVersions, want) {
		t.Errorf("supported versions %q, want %q", k.info.SupportedVersions, want)
	}
	for _, p := range []string{RegistrationSocket(e.cfg.Kubelet.RegistryDir, gpuDriver), k.info.Endpoint} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm()&^SocketMode != 0 {
			t.Errorf("%s: mode %s, want a socket with at most %s", p, fi.Mode(), SocketMode)
		}
	}
}

func TestStandalonePrepareUnprepare(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	a := e.start(t, Options{})
	c := claim("default", "gpu-claim", "11111111-2222-3333-4444-555555555555", "node-a", [2]string{gpuDriver, "gpu-1"}, [2]string{gpuDriver, "gpu-2"})
	e.writeClaim(t, c)
	k := connectKubelet(t, e.cfg, gpuDriver)

	ids := mustPrepared(t, k.prepare(t, c), c)
	want := []string{gpuDriver + "/claim=" + string(c.UID) + "-gpu-1", gpuDriver + "/claim=" + string(c.UID) + "-gpu-2"}
	if !slices.Equal(ids, want) {
		t.Fatalf("CDI IDs %q, want %q", ids, want)
	}
	for _, id := range ids {
		if !cdi.IsQualifiedName(id) {
			t.Errorf("%q is not a qualified CDI name", id)
		}
	}
	path := specPath(e.cfg, gpuDriver, string(c.UID))
	spec := readSpec(t, path)
	names, err := spec.QualifiedNames()
	if err != nil || !slices.Equal(names, want) {
		t.Fatalf("spec devices %q (%v), want %q", names, err, want)
	}
	if env := spec.Devices[0].ContainerEdits.Env; len(env) == 0 || !strings.HasPrefix(env[0], "GPU_DEVICE_GPU_EXAMPLE_COM_1=") {
		t.Errorf("device edits from the plugin missing: env %q", env)
	}
	entry, err := a.record.Cache().Get(string(c.UID))
	if err != nil || entry.State != claimcache.Prepared {
		t.Fatalf("record: %+v, %v", entry, err)
	}

	// Idempotent: answered from the record, the spec is not rewritten.
	before := inode(t, path)
	if again := mustPrepared(t, k.prepare(t, c), c); !slices.Equal(again, ids) {
		t.Errorf("second prepare %q, want %q", again, ids)
	}
	if inode(t, path) != before {
		t.Error("second prepare rewrote the CDI spec")
	}
	// A missing spec is recreated with the same IDs.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if again := mustPrepared(t, k.prepare(t, c), c); !slices.Equal(again, ids) {
		t.Errorf("prepare after spec loss %q, want %q", again, ids)
	}
	if got, _ := readSpec(t, path).QualifiedNames(); !slices.Equal(got, want) {
		t.Errorf("recreated spec names %q", got)
	}

	// Unprepare needs no claim: remove the file first (force-deleted pod).
	if err := os.Remove(filepath.Join(e.claimsDir, c.Name+".yaml")); err != nil {
		t.Fatal(err)
	}
	if r := k.unprepare(t, c)[string(c.UID)]; r == nil || r.Error != "" {
		t.Fatalf("unprepare: %+v", r)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CDI spec still there after unprepare: %v", err)
	}
	if _, err := a.record.Cache().Get(string(c.UID)); !errors.Is(err, claimcache.ErrNotFound) {
		t.Errorf("record still holds the claim: %v", err)
	}
	// Unknown claims succeed.
	unknown := claim("default", "never", "99999999-0000-0000-0000-000000000000", "node-a")
	if r := k.unprepare(t, unknown)[string(unknown.UID)]; r == nil || r.Error != "" {
		t.Fatalf("unprepare of an unknown claim: %+v", r)
	}
}

func TestPrepareRejectsUnusableClaims(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	a := e.start(t, Options{})
	k := connectKubelet(t, e.cfg, gpuDriver)
	ok := claim("default", "ok", "00000000-0000-0000-0000-00000000000a", "node-a", [2]string{gpuDriver, "gpu-0"})
	otherNode := claim("default", "elsewhere", "00000000-0000-0000-0000-00000000000b", "node-b", [2]string{gpuDriver, "gpu-0"})
	unallocated := claim("default", "pending", "00000000-0000-0000-0000-00000000000c", "node-a")
	unallocated.Status.Allocation = nil
	otherDriver := claim("default", "other", "00000000-0000-0000-0000-00000000000d", "node-a", [2]string{"net.example.com", "nic-0"})
	for _, c := range []*resourcev1.ResourceClaim{ok, otherNode, unallocated, otherDriver} {
		e.writeClaim(t, c)
	}
	recreated := claim("default", "ok", "00000000-0000-0000-0000-0000000000ff", "node-a") // same name, another UID
	missing := claim("default", "missing", "00000000-0000-0000-0000-00000000000e", "node-a")

	resp := k.prepare(t, ok, otherNode, unallocated, otherDriver, recreated, missing)
	mustPrepared(t, resp, ok)
	for c, want := range map[*resourcev1.ResourceClaim]string{
		otherNode:   "allocated to another node",
		unallocated: "not allocated",
		otherDriver: "no devices of driver " + gpuDriver,
		recreated:   "has UID " + string(ok.UID),
		missing:     "not found",
	} {
		r := resp[string(c.UID)]
		if r == nil || !strings.Contains(r.Error, want) {
			t.Errorf("claim %s: result %+v, want an error containing %q", c.Name, r, want)
		}
		// A new claim is recorded while it is read; a refused one must
		// not stay in the record.
		if e, err := a.record.Cache().Get(string(c.UID)); err == nil {
			t.Errorf("refused claim %s/%s (UID %s) left in the record as %s", c.Namespace, c.Name, c.UID, e.State)
		}
	}
	if n := a.record.Cache().Len(); n != 1 {
		t.Errorf("record holds %d claims, want only %s", n, ok.Name)
	}
}

func TestTwoDriversOneClaim(t *testing.T) {
	const second = "gpu2.example.com"
	e := newTestEnv(t, gpuDriver, second)
	a := e.start(t, Options{})
	c := claim("ns", "both", "abcdefab-0000-0000-0000-000000000001", "node-a", [2]string{gpuDriver, "gpu-0"}, [2]string{second, "gpu-3"})
	e.writeClaim(t, c)
	k1 := connectKubelet(t, e.cfg, gpuDriver)
	k2 := connectKubelet(t, e.cfg, second)

	ids1 := mustPrepared(t, k1.prepare(t, c), c)
	ids2 := mustPrepared(t, k2.prepare(t, c), c)
	if want := []string{gpuDriver + "/claim=" + string(c.UID) + "-gpu-0"}; !slices.Equal(ids1, want) {
		t.Errorf("driver 1 IDs %q, want %q", ids1, want)
	}
	if want := []string{second + "/claim=" + string(c.UID) + "-gpu-3"}; !slices.Equal(ids2, want) {
		t.Errorf("driver 2 IDs %q, want %q", ids2, want)
	}
	for _, d := range []string{gpuDriver, second} {
		readSpec(t, specPath(e.cfg, d, string(c.UID)))
	}
	entry, err := a.record.Cache().Get(string(c.UID))
	if err != nil || len(entry.Drivers) != 2 {
		t.Fatalf("record %+v, %v: want both drivers", entry, err)
	}
	// The kubelet unprepares per driver; the first call undoes both.
	if r := k1.unprepare(t, c)[string(c.UID)]; r.Error != "" {
		t.Fatal(r.Error)
	}
	if r := k2.unprepare(t, c)[string(c.UID)]; r.Error != "" {
		t.Fatal(r.Error)
	}
	for _, d := range []string{gpuDriver, second} {
		if _, err := os.Stat(specPath(e.cfg, d, string(c.UID))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s spec left behind: %v", d, err)
		}
	}
}

func TestRestartAndReboot(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	c := claim("default", "survivor", "12345678-0000-0000-0000-000000000001", "node-a", [2]string{gpuDriver, "gpu-2"})
	e.writeClaim(t, c)
	a1 := e.start(t, Options{})
	ids := mustPrepared(t, connectKubelet(t, e.cfg, gpuDriver).prepare(t, c), c)
	path := specPath(e.cfg, gpuDriver, string(c.UID))
	ino := inode(t, path)
	if err := a1.Stop(); err != nil {
		t.Fatal(err)
	}

	// Restart, same boot: answered from the restored record.
	a2 := e.start(t, Options{})
	if again := mustPrepared(t, connectKubelet(t, e.cfg, gpuDriver).prepare(t, c), c); !slices.Equal(again, ids) {
		t.Errorf("after restart %q, want %q", again, ids)
	}
	if inode(t, path) != ino {
		t.Error("restart in the same boot prepared the claim again")
	}
	if err := a2.Stop(); err != nil {
		t.Fatal(err)
	}

	// Reboot: the plugin runs again (a fresh spec file).
	e.setBootID(t, "boot-2")
	a3 := e.start(t, Options{})
	if a3.record.Report() == nil || !a3.record.Report().RebootDetected {
		t.Fatalf("reboot not detected: %+v", a3.record.Report())
	}
	if again := mustPrepared(t, connectKubelet(t, e.cfg, gpuDriver).prepare(t, c), c); !slices.Equal(again, ids) {
		t.Errorf("after reboot %q, want %q", again, ids)
	}
	if inode(t, path) == ino {
		t.Error("after a reboot the claim was answered from the record instead of being prepared again")
	}
	entry, err := a3.record.Cache().Get(string(c.UID))
	if err != nil || !entry.PreparedInCurrentBoot() {
		t.Errorf("record after reboot: %+v, %v", entry, err)
	}
}

func TestInterruptedUnprepareFinishedOnStart(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	c := claim("default", "half", "12345678-0000-0000-0000-0000000000aa", "node-a", [2]string{gpuDriver, "gpu-0"})
	e.writeClaim(t, c)
	a1 := e.start(t, Options{})
	mustPrepared(t, connectKubelet(t, e.cfg, gpuDriver).prepare(t, c), c)
	// A crash right after UnprepareStarted was recorded.
	if _, err := a1.record.Cache().StartUnprepare(string(c.UID)); err != nil {
		t.Fatal(err)
	}
	if err := a1.Stop(); err != nil {
		t.Fatal(err)
	}
	// And a spec of a claim that was never recorded (crash before recording).
	orphan := "deadbeef-0000-0000-0000-000000000000"
	spec := &cdi.Spec{Version: "0.5.0", Kind: gpuDriver + "/" + cdi.ClaimClass, Devices: []cdi.Device{{Name: orphan + "-gpu-1", ContainerEdits: cdi.ContainerEdits{Env: []string{"A=1"}}}}}
	if _, err := (cdi.SpecDir{Path: e.cfg.CDI.Dir}).Write(spec, orphan); err != nil {
		t.Fatal(err)
	}

	a2 := e.start(t, Options{})
	if _, err := a2.record.Cache().Get(string(c.UID)); !errors.Is(err, claimcache.ErrNotFound) {
		t.Errorf("interrupted unprepare not finished: %v", err)
	}
	for _, uid := range []string{string(c.UID), orphan} {
		if _, err := os.Stat(specPath(e.cfg, gpuDriver, uid)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("spec of %s left: %v", uid, err)
		}
	}
}

func TestPluginKilledPrepareIsRetryable(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	a := e.start(t, Options{})
	c := claim("default", "retry", "12345678-0000-0000-0000-0000000000bb", "node-a", [2]string{gpuDriver, "gpu-3"})
	e.writeClaim(t, c)
	k := connectKubelet(t, e.cfg, gpuDriver)
	p, _ := a.plugins.Plugin("gpu0")
	pid := p.Status().PID
	if pid == 0 {
		t.Fatal("plugin has no PID")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Like the kubelet: retry until it works; the failures in between must
	// say they are retryable, and the claim must never be half-recorded as
	// prepared.
	var sawRetryable bool
	for attempt := 0; ; attempt++ {
		r := k.prepare(t, c)[string(c.UID)]
		if r.Error == "" {
			break
		}
		if !strings.HasPrefix(r.Error, "retryable: ") {
			t.Fatalf("attempt %d: non-retryable error %q", attempt, r.Error)
		}
		sawRetryable = true
		if entry, err := a.record.Cache().Get(string(c.UID)); err == nil && entry.State == claimcache.Prepared {
			t.Fatal("claim recorded as prepared although the plugin call failed")
		}
		if attempt > 600 {
			t.Fatal("plugin never came back")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if p.Status().PID == pid {
		t.Error("plugin not restarted")
	}
	t.Logf("saw a retryable error before the restart: %v", sawRetryable)
	readSpec(t, specPath(e.cfg, gpuDriver, string(c.UID)))
}

func TestV1beta1Service(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	e.start(t, Options{})
	c := claim("default", "beta", "12345678-0000-0000-0000-0000000000cc", "node-a", [2]string{gpuDriver, "gpu-0"})
	e.writeClaim(t, c)
	k := connectKubelet(t, e.cfg, gpuDriver)
	client := drapbv1beta1.NewDRAPluginClient(k.conn)
	ctx := context.Background()
	resp, err := client.NodePrepareResources(ctx, &drapbv1beta1.NodePrepareResourcesRequest{Claims: []*drapbv1beta1.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Claims[string(c.UID)]
	if r == nil || r.Error != "" || len(r.Devices) != 1 || r.Devices[0].CdiDeviceIds[0] != gpuDriver+"/claim="+string(c.UID)+"-gpu-0" {
		t.Fatalf("v1beta1 prepare: %+v", r)
	}
	uresp, err := client.NodeUnprepareResources(ctx, &drapbv1beta1.NodeUnprepareResourcesRequest{Claims: []*drapbv1beta1.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}}})
	if err != nil || uresp.Claims[string(c.UID)].Error != "" {
		t.Fatalf("v1beta1 unprepare: %+v %v", uresp, err)
	}
}

// healthClients are the kubelet's clients of each API version the agent
// serves (healthServices): v1alpha1 through the wrapper the kubelet of 1.37
// itself uses for a plugin that serves only v1alpha1, so the messages are
// v1alpha1's on the wire and v1's here.
var healthClients = map[string]func(grpc.ClientConnInterface) drahealthv1.DRAResourceHealthClient{
	drahealthv1.DRAResourceHealthService: drahealthv1.NewDRAResourceHealthClient,
	drahealthv1alpha1.DRAResourceHealthService: func(conn grpc.ClientConnInterface) drahealthv1.DRAResourceHealthClient {
		return drahealthv1.V1Alpha1ClientWrapper{Client: drahealthv1alpha1.NewDRAResourceHealthClient(conn)}
	},
}

// TestHealthStream watches device health as a kubelet of each API version
// does: the first snapshot, then a device turned unhealthy.
func TestHealthStream(t *testing.T) {
	for _, service := range healthServices {
		t.Run(service, func(t *testing.T) {
			client := healthClients[service]
			if client == nil {
				t.Fatalf("no client for %s", service)
			}
			e := newTestEnv(t, gpuDriver)
			e.start(t, Options{})
			k := connectKubelet(t, e.cfg, gpuDriver)
			if !slices.Contains(k.info.SupportedVersions, service) {
				t.Fatalf("%s not announced at registration: %q", service, k.info.SupportedVersions)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			stream, err := client(k.conn).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			first, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if len(first.Devices) != 4 || first.Devices[0].Health != drahealthv1.HealthStatus_HEALTHY {
				t.Fatalf("first snapshot: %v", first.Devices)
			}
			// gpu-plugin marks GPU 2 unhealthy when <devRoot>/gpu2.unhealthy exists.
			marker := filepath.Join(e.root, "dev", gpuDriver, "gpu2.unhealthy")
			if err := os.WriteFile(marker, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			for {
				msg, err := stream.Recv()
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range msg.Devices {
					if d.Device.DeviceName == "gpu-2" && d.Health == drahealthv1.HealthStatus_UNHEALTHY {
						return
					}
				}
			}
		})
	}
}

func TestStaleSocketReplacedAndNonSocketRefused(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	// A stale socket from a dead agent.
	stale := RegistrationSocket(e.cfg.Kubelet.RegistryDir, gpuDriver)
	lis, err := listenUnix(stale)
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	e.start(t, Options{})
	connectKubelet(t, e.cfg, gpuDriver) // fails if the stale socket were still in place

	other := filepath.Join(e.root, "file.sock")
	if err := os.WriteFile(other, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := listenUnix(other); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("listenUnix over a regular file: %v", err)
	}
	if data, _ := os.ReadFile(other); string(data) != "precious" {
		t.Error("regular file replaced")
	}
}

func TestStopRefusesNewCalls(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	a := e.start(t, Options{})
	c := claim("default", "kept", "12345678-0000-0000-0000-0000000000dd", "node-a", [2]string{gpuDriver, "gpu-1"})
	e.writeClaim(t, c)
	k := connectKubelet(t, e.cfg, gpuDriver)
	mustPrepared(t, k.prepare(t, c), c)
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err := k.dra.NodePrepareResources(context.Background(), &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{{Namespace: "default", Name: "kept", Uid: string(c.UID)}}})
	if code := status.Code(err); code != codes.Unavailable {
		t.Errorf("call after Stop: %v (code %s), want Unavailable", err, code)
	}
	// The record and the slices stay.
	if _, err := os.Stat(specPath(e.cfg, gpuDriver, string(c.UID))); err != nil {
		t.Errorf("CDI spec removed by Stop: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(e.cfg.Slices.DryRunDir, "*.yaml"))
	if len(files) == 0 {
		t.Error("dry-run slices removed by Stop")
	}
}
