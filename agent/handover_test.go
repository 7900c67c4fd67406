package agent

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	resourcev1 "k8s.io/api/resource/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/dranode/dranode/agent/config"
	"github.com/dranode/dranode/claimcache"
)

func TestInstanceSocketNames(t *testing.T) {
	for _, tc := range []struct {
		id, reg, dra string
	}{
		{"", "/reg/gpu.example.com-reg.sock", "/plugins/gpu.example.com/dra.sock"},
		{"0b7e4c2a-1f3d-4e5a-9c8b-123456789abc", "/reg/gpu.example.com-0b7e4c2a-1f3d-4e5a-9c8b-123456789abc-reg.sock", "/plugins/gpu.example.com/dra-0b7e4c2a-1f3d-4e5a-9c8b-123456789abc.sock"},
	} {
		if got := RegistrationSocketFor("/reg", "gpu.example.com", tc.id); got != tc.reg {
			t.Errorf("RegistrationSocketFor(%q) = %q, want %q", tc.id, got, tc.reg)
		}
		if got := DRASocketFor("/plugins", "gpu.example.com", tc.id); got != tc.dra {
			t.Errorf("DRASocketFor(%q) = %q, want %q", tc.id, got, tc.dra)
		}
	}
}

// Stale-socket cleanup touches only names this driver's instances use.
func TestOwnedSocketNames(t *testing.T) {
	const uid = "0b7e4c2a-1f3d-4e5a-9c8b-123456789abc"
	for _, tc := range []struct {
		base string
		want bool
	}{
		{"gpu.example.com-reg.sock", true},
		{"gpu.example.com-" + uid + "-reg.sock", true},
		{"gpu.example.com-instance1-reg.sock", true},
		{"dra.sock", true},
		{"dra-" + uid + ".sock", true},
		{"gpu.example.com-other-driver-reg.sock", false}, // driver "gpu.example.com-other-driver"? not a UID
		{"other.example.com-reg.sock", false},
		{"dra-../x.sock", false},
	} {
		if got := ownedName(tc.base, "gpu.example.com"); got != tc.want {
			t.Errorf("ownedName(%q) = %v, want %v", tc.base, got, tc.want)
		}
	}
}

func TestInstanceIDValidated(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"", true},
		{"0b7e4c2a-1f3d-4e5a-9c8b-123456789abc", true},
		{"a/b", false},
		{"..", false},
		{string(make([]byte, 64)), false},
	} {
		cfg := config.Default()
		cfg.NodeName = "node-a"
		cfg.Slices.DryRunDir, cfg.Claims.Dir = "/dry-run", "/claims"
		cfg.Kubelet.InstanceID = tc.id
		err := cfg.Validate()
		var ce *config.Error
		switch {
		case tc.ok && errors.As(err, &ce) && ce.Key == "kubelet.instanceID":
			t.Errorf("instanceID %q refused: %v", tc.id, err)
		case !tc.ok && (!errors.As(err, &ce) || ce.Key != "kubelet.instanceID"):
			t.Errorf("instanceID %q: error %v, want a config.Error for kubelet.instanceID", tc.id, err)
		}
	}
}

func TestSocketPathTooLongRefused(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, strings.Repeat("x", MaxSocketPath-len(dir)))
	if _, err := listenUnix(long); !errors.Is(err, ErrSocketPathTooLong) || !strings.Contains(err.Error(), long) {
		t.Fatalf("listenUnix(%d bytes) = %v, want ErrSocketPathTooLong naming the path", len(long), err)
	}
	ok := filepath.Join(dir, "s.sock")
	lis, err := listenUnix(ok)
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
}

// A DRA socket path of exactly MaxSocketPath bytes is bound, not only
// accepted by the length check: the private directory listenUnix binds in
// first must not make the bind path longer than the final one.
func TestSocketPathAtTheLimitListens(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, strings.Repeat("d", MaxSocketPath-len(dir)-len("/dra.sock")-1))
	path := DRASocket(filepath.Dir(sub), filepath.Base(sub))
	if len(path) != MaxSocketPath {
		t.Fatalf("test path is %d bytes, want %d", len(path), MaxSocketPath)
	}
	lis, err := listenUnix(path)
	if err != nil {
		t.Fatalf("listenUnix(%d bytes): %v", len(path), err)
	}
	defer lis.Close()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	conn.Close()
	if left, _ := filepath.Glob(filepath.Join(sub, ".*")); len(left) != 0 {
		t.Errorf("private bind directories left: %v", left)
	}
}

// connectInstance is connectKubelet for one instance's sockets.
func connectInstance(t *testing.T, cfg config.Config, driverName string) *kubelet {
	t.Helper()
	reg := registerapi.NewRegistrationClient(dial(t, RegistrationSocketFor(cfg.Kubelet.RegistryDir, driverName, cfg.Kubelet.InstanceID)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	conn := dial(t, info.Endpoint)
	return &kubelet{info: info, conn: conn, dra: drapbv1.NewDRAPluginClient(conn)}
}

// Two instances in one process (the flock is per open file, so they
// exclude each other as two processes do): the second takes the record
// over, the first forwards to it, and takes the record back once the
// second is gone. Run with -race, this covers the hand-over's locking.
func TestHandOverForwardAndReclaim(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	e.cfg.Kubelet.InstanceID = "instance-a"
	cfgA := e.cfg
	a := e.start(t, Options{})
	kA := connectInstance(t, cfgA, gpuDriver)
	first := claim("default", "first", "00000000-0000-0000-0000-000000000001", "node-a", [2]string{gpuDriver, "gpu-0"})
	second := claim("default", "second", "00000000-0000-0000-0000-000000000002", "node-a", [2]string{gpuDriver, "gpu-1"})
	third := claim("default", "third", "00000000-0000-0000-0000-000000000003", "node-a", [2]string{gpuDriver, "gpu-2"})
	for _, c := range []*resourcev1.ResourceClaim{first, second, third} {
		e.writeClaim(t, c)
	}
	mustPrepared(t, kA.prepare(t, first), first)

	e.cfg.Kubelet.InstanceID = "instance-b"
	b := e.start(t, Options{})
	if a.record.Held() || !b.record.Held() {
		t.Fatalf("after the hand-over: a holds %v, b holds %v; want false, true", a.record.Held(), b.record.Held())
	}
	if err := a.Ready(); err == nil {
		t.Error("the instance that handed the record over is ready")
	}
	// Through the old instance: answered by the new one, from its record.
	mustPrepared(t, kA.prepare(t, second), second)
	if e, err := b.record.Cache().Get(string(second.UID)); err != nil || e.State != claimcache.Prepared {
		t.Errorf("claim prepared through the old instance: in the new one's record %+v, %v", e, err)
	}
	var m dto.Metric
	if err := a.metrics.upgrade.forwarded.WithLabelValues(gpuDriver, "ok").Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 1 {
		t.Errorf("forwarded calls of the old instance: %v, want 1", got)
	}

	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	mustPrepared(t, kA.prepare(t, third), third)
	if !a.record.Held() {
		t.Fatal("the old instance did not take the record back")
	}
	for _, c := range []*resourcev1.ResourceClaim{first, second, third} {
		if e, err := a.record.Cache().Get(string(c.UID)); err != nil || e.State != claimcache.Prepared {
			t.Errorf("claim %s after the record came back: %+v, %v", c.Name, e, err)
		}
	}
	if r := kA.unprepare(t, first, second, third); len(r) != 3 {
		t.Errorf("unprepare answers: %v", r)
	}
}
