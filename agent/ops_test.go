package agent

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestManyClaimsOneCallAndConcurrentCallsOneClaim(t *testing.T) {
	e := newTestEnv(t, gpuDriver).withGPUs(21)
	a := e.start(t, Options{})
	k := connectKubelet(t, e.cfg, gpuDriver)
	var claims []*resourcev1.ResourceClaim
	for i := range 20 {
		c := claim("default", fmt.Sprintf("c%02d", i), fmt.Sprintf("00000000-0000-0000-0001-%012d", i), "node-a", [2]string{gpuDriver, fmt.Sprintf("gpu-%d", i)})
		e.writeClaim(t, c)
		claims = append(claims, c)
	}
	resp := k.prepare(t, claims...)
	for _, c := range claims {
		mustPrepared(t, resp, c)
	}
	if a.record.Cache().Len() != 20 {
		t.Errorf("record holds %d claims, want 20", a.record.Cache().Len())
	}

	// The kubelet may call twice for one claim (two pods); both get the same
	// answer and the record has one entry.
	same := claim("default", "shared", "00000000-0000-0000-0002-000000000000", "node-a", [2]string{gpuDriver, "gpu-20"})
	e.writeClaim(t, same)
	var wg sync.WaitGroup
	results := make([][]string, 8)
	for i := range results {
		wg.Go(func() { results[i] = mustPrepared(t, k.prepare(t, same), same) })
	}
	wg.Wait()
	for i, r := range results {
		if len(r) != 1 || !slices.Equal(r, results[0]) {
			t.Errorf("call %d: %q, call 0: %q", i, r, results[0])
		}
	}
	unp := k.unprepare(t, append(claims, same)...)
	for uid, r := range unp {
		if r.Error != "" {
			t.Errorf("unprepare %s: %s", uid, r.Error)
		}
	}
	if a.record.Cache().Len() != 0 {
		t.Errorf("record holds %d claims after unprepare", a.record.Cache().Len())
	}
}

func TestMetricsAndProbes(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	a := e.start(t, Options{})
	base := "http://" + a.HTTPAddr()
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d %s", code, body)
	}
	// Standalone: ready without a kubelet registration.
	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d %s", code, body)
	}
	c := claim("default", "m", "00000000-0000-0000-0003-000000000000", "node-a", [2]string{gpuDriver, "gpu-1"})
	e.writeClaim(t, c)
	bad := claim("default", "absent", "00000000-0000-0000-0003-000000000001", "node-a")
	k := connectKubelet(t, e.cfg, gpuDriver)
	k.prepare(t, c, bad)
	_, metrics := get(t, base+"/metrics")
	for _, want := range []string{
		`dranode_prepare_duration_seconds_count{driver="gpu.example.com"} 2`,
		`dranode_prepare_errors_total{driver="gpu.example.com"} 1`,
		`dranode_claims_recorded 1`,
		`dranode_plugin_restarts_total{plugin="gpu0"} 0`,
		`dranode_dry_run_slice_files_written_total{driver="gpu.example.com"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	if a.Ready() == nil {
		t.Error("Ready after Stop")
	}
}

// In cluster mode readiness waits for the kubelet's registration.
func TestReadyWaitsForRegistration(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	a := e.start(t, Options{})
	a.standalone = false // as if a kubelet were expected
	if err := a.Ready(); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("Ready before registration: %v", err)
	}
	connectKubelet(t, e.cfg, gpuDriver) // reports PluginRegistered
	if err := a.Ready(); err != nil {
		t.Errorf("Ready after registration: %v", err)
	}
}

// TestPluginKilledDuringCalls kills the plugin while batches of prepares and
// unprepares are in flight: every failure must be retryable, and retrying
// like the kubelet ends with every claim prepared, then unprepared.
func TestPluginKilledDuringCalls(t *testing.T) {
	e := newTestEnv(t, gpuDriver).withGPUs(10)
	src := &memClaims{}
	claims := benchClaims(10)
	for _, c := range claims {
		src.put(c)
	}
	a := e.start(t, Options{Claims: src})
	k := connectKubelet(t, e.cfg, gpuDriver)
	p, _ := a.plugins.Plugin("gpu0")
	pid := p.Status().PID

	checkRetryable := func(uid, msg string) {
		if msg != "" && !strings.HasPrefix(msg, "retryable: ") {
			t.Errorf("claim %s: non-retryable error %q", uid, msg)
		}
	}
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for a.record.Cache().Len() == 0 { // until the first batch has started committing
			time.Sleep(100 * time.Microsecond)
		}
		_ = syscallKill(pid)
	}()
	failures := 0
	for round := 0; ; round++ {
		done := true
		for uid, r := range k.prepare(t, claims...) {
			checkRetryable(uid, r.Error)
			if r.Error != "" {
				done = false
				failures++
			}
		}
		select {
		case <-killed:
		default:
			done = false // keep going until the kill happened
		}
		if done {
			break
		}
		if round > 2000 {
			t.Fatal("claims never all prepared")
		}
		time.Sleep(5 * time.Millisecond) // the kubelet backs off too
	}
	t.Logf("%d failed claim prepares around the kill", failures)
	for round := 0; ; round++ {
		done := true
		for uid, r := range k.unprepare(t, claims...) {
			checkRetryable(uid, r.Error)
			done = done && r.Error == ""
		}
		if done {
			break
		}
		if round > 2000 {
			t.Fatal("claims never all unprepared")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if a.record.Cache().Len() != 0 {
		t.Errorf("record holds %d claims at the end", a.record.Cache().Len())
	}
}

// A device allocated twice in one claim (consumable capacity, each with its
// share ID) gets two CDI devices, and the share IDs reach the kubelet; admin
// access passes through to the plugin.
func TestSharedDevicesAndAdminAccess(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	e.start(t, Options{})
	c := claim("default", "shared-gpu", "00000000-0000-0000-0004-000000000000", "node-a", [2]string{gpuDriver, "gpu-1"}, [2]string{gpuDriver, "gpu-1"}, [2]string{gpuDriver, "gpu-2"})
	results := c.Status.Allocation.Devices.Results
	share1, share2 := types.UID("aaaaaaaa-0000-0000-0000-000000000001"), types.UID("aaaaaaaa-0000-0000-0000-000000000002")
	results[0].ShareID, results[1].ShareID = &share1, &share2
	results[1].Request = "req2"
	results[2].AdminAccess = ptrTo(true)
	e.writeClaim(t, c)
	r := connectKubelet(t, e.cfg, gpuDriver).prepare(t, c)[string(c.UID)]
	if r.Error != "" {
		t.Fatal(r.Error)
	}
	if len(r.Devices) != 3 {
		t.Fatalf("%d devices, want 3: %v", len(r.Devices), r.Devices)
	}
	gotShares := map[string]bool{}
	ids := map[string]bool{}
	for _, d := range r.Devices {
		if d.ShareId != nil {
			gotShares[*d.ShareId] = true
		}
		for _, id := range d.CdiDeviceIds {
			ids[id] = true
		}
	}
	if !gotShares[string(share1)] || !gotShares[string(share2)] || len(gotShares) != 2 {
		t.Errorf("share IDs %v, want %s and %s", gotShares, share1, share2)
	}
	if len(ids) != 3 {
		t.Errorf("CDI IDs %v are not 3 distinct names", ids)
	}
	names, err := readSpec(t, specPath(e.cfg, gpuDriver, string(c.UID))).QualifiedNames()
	if err != nil || len(names) != 3 {
		t.Errorf("spec names %v, %v", names, err)
	}
	for _, n := range names {
		if !ids[n] {
			t.Errorf("spec device %s not returned to the kubelet", n)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
