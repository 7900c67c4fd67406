package pluginmgr_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/pluginmgr/internal/testbin"
)

func quietOptions() pluginmgr.Options {
	return pluginmgr.Options{NodeName: "node-1", Logger: hclog.NewNullLogger(), StartTimeout: 20 * time.Second}
}

func testConfig(t testing.TB, cfg any, args ...string) pluginmgr.PluginConfig {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pluginmgr.PluginConfig{Name: "test", Path: testDriverPath, SHA256: testbin.SHA256(testDriverPath), Args: args, Config: raw}
}

// twoConfigs configures the test plugin twice, as "test" and "second".
func twoConfigs(t testing.TB) []pluginmgr.PluginConfig {
	first := testConfig(t, nil)
	second := first
	second.Name = "second"
	return []pluginmgr.PluginConfig{first, second}
}

func launch(t testing.TB, cfg pluginmgr.PluginConfig, opts pluginmgr.Options) *pluginmgr.Plugin {
	t.Helper()
	p, err := pluginmgr.Launch(context.Background(), cfg, opts)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func claimFor(uid, device string) pluginmgr.Claim {
	return pluginmgr.Claim{
		UID: types.UID(uid), Namespace: "default", Name: "claim-" + uid,
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: "test.dranode.dev", Pool: "node", Device: device}},
	}
}

func TestFullCallSet(t *testing.T) {
	var mu sync.Mutex
	var health [][]pluginmgr.DeviceHealth
	opts := quietOptions()
	opts.OnHealth = func(_ string, h []pluginmgr.DeviceHealth) {
		mu.Lock()
		health = append(health, h)
		mu.Unlock()
	}
	p := launch(t, testConfig(t, map[string]any{"devices": 3}), opts)
	ctx := context.Background()

	if info := p.Info(); info.DriverName != "test.dranode.dev" || info.DriverVersion != "v0.0.1" || !info.Health || info.StatelessPrepare {
		t.Errorf("Info = %+v", info)
	}
	inv, seq, err := p.WaitInventory(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if seq != 1 || len(inv.Pools) != 1 || len(inv.Pools[0].Devices) != 3 {
		t.Fatalf("inventory %d = %+v", seq, inv)
	}
	dev := inv.Pools[0].Devices[2]
	memory := dev.Capacity["memory"].Value
	if dev.Name != "dev2" || *dev.Attributes["index"].IntValue != 2 || memory.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("device did not survive the wire: %+v", dev)
	}
	// Every call hands out its own copy: a caller editing one cannot change
	// what the next caller (or the agent's publisher) sees.
	inv.Pools[0].Devices[2].Name = "edited"
	if again, againSeq := p.Inventory(); againSeq != seq || again.Pools[0].Devices[2].Name != "dev2" {
		t.Errorf("Inventory() after editing an earlier copy = %d %+v, want %d with dev2", againSeq, again.Pools[0].Devices[2].Name, seq)
	}

	claims := []pluginmgr.Claim{claimFor("a", "dev0"), {UID: "b", Name: "empty"}}
	results, err := p.Prepare(ctx, claims)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 || results[0].ClaimUID != "a" || results[0].Err != nil || len(results[0].Devices) != 1 {
		t.Fatalf("results = %+v", results)
	}
	got := results[0].Devices[0]
	if got.Device != "dev0" || !slices.Equal(got.Edits.Env, []string{"TEST_DEVICE=dev0"}) ||
		got.Edits.DeviceNodes[0].FileMode == nil || *got.Edits.DeviceNodes[0].FileMode != 0o660 || got.Edits.DeviceNodes[0].UID != nil {
		t.Errorf("prepared device = %+v", got)
	}
	var claimErr *pluginmgr.ClaimError
	if !errors.As(results[1].Err, &claimErr) || claimErr.ClaimUID != "b" || !strings.Contains(claimErr.Message, "no allocation results") {
		t.Errorf("claim b error = %v", results[1].Err)
	}

	un, err := p.Unprepare(ctx, []pluginmgr.PreparedClaim{{UID: "a", Devices: results[0].Devices}})
	if err != nil || len(un) != 1 || un[0].ClaimUID != "a" || un[0].Err != nil {
		t.Fatalf("Unprepare = %+v, %v", un, err)
	}

	mu.Lock()
	defer mu.Unlock()
	// Health is delivered asynchronously; the first snapshot arrives with
	// the stream, long before the calls above complete, but only assert on
	// its content when it is there.
	if len(health) > 0 && (health[0][0].Device != "dev0" || health[0][0].Status != pluginmgr.Healthy) {
		t.Errorf("health = %+v", health)
	}
}

// StatelessPrepare crosses the wire as the plugin reports it (false in
// TestFullCallSet).
func TestInfoStatelessPrepare(t *testing.T) {
	p := launch(t, testConfig(t, map[string]any{"statelessPrepare": true}), quietOptions())
	if info := p.Info(); !info.StatelessPrepare {
		t.Errorf("Info = %+v, want StatelessPrepare", info)
	}
}

func TestCallHonoursDeadline(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "block"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p := launch(t, testConfig(t, map[string]any{"blockDir": dir}), quietOptions())
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := p.Prepare(ctx, []pluginmgr.Claim{claimFor("a", "dev0")})
		errc <- err
	}()
	waitForFile(t, filepath.Join(dir, "prepare-started"))
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Prepare returned %v, want context.Canceled", err)
	}
	if st := p.Status(); st.State != pluginmgr.StateRunning || st.Restarts != 0 {
		t.Errorf("a cancelled call must not disturb the plugin: %+v", st)
	}
}

func waitForFile(t testing.TB, path string) []byte {
	t.Helper()
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			return b
		}
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestKillDuringPrepare(t *testing.T) {
	dir := t.TempDir()
	block := filepath.Join(dir, "block")
	if err := os.WriteFile(block, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	opts := quietOptions()
	opts.Backoff = pluginmgr.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}
	p := launch(t, testConfig(t, map[string]any{"blockDir": dir}), opts)
	ctx := context.Background()
	_, seq, err := p.WaitInventory(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	firstPID := p.Status().PID

	errc := make(chan error, 1)
	go func() {
		_, err := p.Prepare(ctx, []pluginmgr.Claim{claimFor("a", "dev0")})
		errc <- err
	}()
	pid, err := strconv.Atoi(string(waitForFile(t, filepath.Join(dir, "prepare-started"))))
	if err != nil || pid != firstPID {
		t.Fatalf("plugin pid %d (%v), status says %d", pid, err, firstPID)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = <-errc
	if !errors.Is(err, pluginmgr.ErrPluginUnavailable) || status.Code(err) != codes.Unavailable {
		t.Fatalf("Prepare during kill -9 returned %v (code %v), want ErrPluginUnavailable/Unavailable", err, status.Code(err))
	}
	// Only now: removed before the kill, the block let the dying plugin
	// finish the Prepare first (a check failed that way), and the
	// restarted plugin's Prepare below must not block.
	if err := os.Remove(block); err != nil {
		t.Fatal(err)
	}

	// The plugin comes back and its device stream resumes.
	inv, _, err := p.WaitInventory(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Pools[0].Devices) != 2 {
		t.Errorf("inventory after restart = %+v", inv)
	}
	st := p.Status()
	if st.State != pluginmgr.StateRunning || st.Restarts != 1 || st.PID == firstPID || st.PID == 0 {
		t.Errorf("status after restart = %+v", st)
	}
	results, err := p.Prepare(ctx, []pluginmgr.Claim{claimFor("a", "dev0")})
	if err != nil || results[0].Err != nil {
		t.Fatalf("Prepare after restart = %+v, %v", results, err)
	}
}

func TestHandshakeFailures(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := testbin.SHA256(testDriverPath)
	tests := []struct {
		name    string
		cfg     pluginmgr.PluginConfig
		timeout time.Duration
		want    error
		mention []string
	}{
		{"not executable", pluginmgr.PluginConfig{Path: notExec, SHA256: testbin.SHA256(notExec)}, 0, pluginmgr.ErrNotExecutable, []string{notExec, "-rw-r--r--"}},
		{"missing", pluginmgr.PluginConfig{Path: notExec + ".missing", SHA256: sum}, 0, pluginmgr.ErrNotExecutable, []string{"no such file"}},
		{"wrong checksum", pluginmgr.PluginConfig{Path: testDriverPath, SHA256: strings.Repeat("ab", 32)}, 0, pluginmgr.ErrChecksumMismatch, []string{testDriverPath, sum, strings.Repeat("ab", 32)}},
		{"wrong cookie", pluginmgr.PluginConfig{Path: testDriverPath, SHA256: sum, Args: []string{"-mode=wrong-cookie"}}, 0, pluginmgr.ErrMagicCookie, nil},
		{"protocol v2 only", pluginmgr.PluginConfig{Path: testDriverPath, SHA256: sum, Args: []string{"-mode=v2-only"}}, 0, pluginmgr.ErrNoCommonVersion, []string{"Plugin version: 2"}},
		{"stdout before handshake", pluginmgr.PluginConfig{Path: testDriverPath, SHA256: sum, Args: []string{"-mode=stdout"}}, 0, pluginmgr.ErrStdoutBeforeHandshake, []string{"starting up, hello"}},
		{"start timeout", pluginmgr.PluginConfig{Path: testDriverPath, SHA256: sum, Args: []string{"-mode=hang"}}, 500 * time.Millisecond, pluginmgr.ErrStartTimeout, nil},
		{"bad mode exits", pluginmgr.PluginConfig{Path: testDriverPath, SHA256: sum, Args: []string{"-mode=nonsense"}}, 0, pluginmgr.ErrExitedBeforeHandshake, []string{`unknown -mode \"nonsense\"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := quietOptions()
			if tt.timeout > 0 {
				opts.StartTimeout = tt.timeout
			}
			p, err := pluginmgr.Launch(context.Background(), tt.cfg, opts)
			if err == nil {
				p.Close()
				t.Fatal("Launch succeeded")
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Launch error %q does not match %q", err, tt.want)
			}
			for _, m := range tt.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
			if tt.want == pluginmgr.ErrChecksumMismatch {
				var ce *pluginmgr.ChecksumError
				if !errors.As(err, &ce) || ce.Actual != sum || ce.Path != testDriverPath {
					t.Errorf("checksum error = %#v", ce)
				}
			}
			// VerifyBinary checks ahead of time what Launch checks before exec.
			if tt.want == pluginmgr.ErrNotExecutable || tt.want == pluginmgr.ErrChecksumMismatch {
				if verr := pluginmgr.VerifyBinary(tt.cfg.Path, tt.cfg.SHA256); !errors.Is(verr, tt.want) {
					t.Errorf("VerifyBinary = %v, want %v", verr, tt.want)
				}
			}
		})
	}
	if err := pluginmgr.VerifyBinary(testDriverPath, strings.ToUpper(sum)); err != nil {
		t.Errorf("VerifyBinary of a good binary (digest in upper case) = %v", err)
	}
	if err := pluginmgr.VerifyBinary(notExec+".missing", sum); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("VerifyBinary of a missing file = %v, want os.ErrNotExist", err)
	}
}

func TestInvalidConfig(t *testing.T) {
	for _, cfg := range []pluginmgr.PluginConfig{
		{Path: "relative/plugin", SHA256: strings.Repeat("0", 64)},
		{Path: "/abs/plugin", SHA256: "abc"},
		{Path: "/abs/plugin", SHA256: strings.Repeat("0", 64), Config: json.RawMessage("{")},
	} {
		if _, err := pluginmgr.Launch(context.Background(), cfg, quietOptions()); !errors.Is(err, pluginmgr.ErrInvalidConfig) {
			t.Errorf("Launch(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

func TestInvalidInfoRefusesStart(t *testing.T) {
	_, err := pluginmgr.Launch(context.Background(), testConfig(t, map[string]any{"driverName": "Not A DNS Name"}), quietOptions())
	if !errors.Is(err, pluginmgr.ErrInvalidInfo) || !strings.Contains(err.Error(), `"Not A DNS Name"`) {
		t.Fatalf("Launch = %v, want ErrInvalidInfo naming the driver name", err)
	}
}

func TestCallsWhileRestartingAreRetryable(t *testing.T) {
	restarting := make(chan struct{})
	var once sync.Once
	opts := quietOptions()
	// A long first delay keeps the plugin down while the test calls it.
	opts.Backoff = pluginmgr.Backoff{Initial: time.Hour, Max: time.Hour}
	opts.OnStatus = func(s pluginmgr.Status) {
		if s.State == pluginmgr.StateRestarting {
			once.Do(func() { close(restarting) })
		}
	}
	p := launch(t, testConfig(t, nil), opts)
	if err := syscall.Kill(p.Status().PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-restarting
	_, err := p.Prepare(context.Background(), []pluginmgr.Claim{claimFor("a", "dev0")})
	var ue *pluginmgr.UnavailableError
	if !errors.As(err, &ue) || ue.Plugin != "test" || status.Code(err) != codes.Unavailable {
		t.Fatalf("Prepare while restarting = %v, want *UnavailableError", err)
	}
	if st := p.Status(); st.State != pluginmgr.StateRestarting || st.PID != 0 || st.Failures != 1 || st.Delay != time.Hour {
		t.Errorf("status while restarting = %+v", st)
	}
	// Close does not wait for the backoff.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if st := p.Status(); st.State != pluginmgr.StateStopped {
		t.Errorf("status after Close = %+v", st)
	}
	if _, err := p.Prepare(context.Background(), nil); !errors.Is(err, pluginmgr.ErrClosed) {
		t.Errorf("Prepare after Close = %v, want ErrClosed", err)
	}
}

// syncBuffer is an io.Writer the host logger and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestPluginLogsReachHost(t *testing.T) {
	var buf syncBuffer
	opts := quietOptions()
	opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "host", Output: &buf, Level: hclog.Info})
	p := launch(t, testConfig(t, map[string]any{"devices": 5}), opts)
	if err := p.Close(); err != nil { // flushes the plugin's stderr
		t.Fatal(err)
	}
	log := buf.String()
	if !strings.Contains(log, "configured") || !strings.Contains(log, "devices=5") || !strings.Contains(log, "host.test") {
		t.Errorf("the plugin's log line did not reach the host logger with its fields:\n%s", log)
	}
}

// Start names each plugin that failed, and runs the others.
func TestManagerStartErrorNamesThePlugin(t *testing.T) {
	m := pluginmgr.NewManager(quietOptions())
	defer m.Close()
	good := testConfig(t, nil)
	bad := good
	bad.Name, bad.SHA256 = "bad", strings.Repeat("ab", 32)
	err := m.Start(context.Background(), []pluginmgr.PluginConfig{bad, good})
	var se *pluginmgr.StartError
	if !errors.As(err, &se) || se.Plugin != "bad" || !errors.Is(err, pluginmgr.ErrChecksumMismatch) {
		t.Fatalf("Start = %v, want a *StartError for plugin bad matching ErrChecksumMismatch", err)
	}
	if _, ok := m.Plugin(good.Name); !ok {
		t.Errorf("plugin %s should run", good.Name)
	}
}

func TestManagerRefusesDuplicateNames(t *testing.T) {
	m := pluginmgr.NewManager(quietOptions())
	defer m.Close()
	cfg := testConfig(t, nil)
	err := m.Start(context.Background(), []pluginmgr.PluginConfig{cfg, cfg})
	if !errors.Is(err, pluginmgr.ErrInvalidConfig) || !strings.Contains(err.Error(), `"test" used twice`) {
		t.Fatalf("Start with a duplicate name = %v", err)
	}
	if _, ok := m.Plugin("test"); !ok {
		t.Error("the first plugin of that name should run")
	}
	if st := m.Statuses(); len(st) != 1 || st[0].State != pluginmgr.StateRunning {
		t.Errorf("statuses = %+v", st)
	}
}

func TestBackoffAndCrashLoop(t *testing.T) {
	var mu sync.Mutex
	var statuses []pluginmgr.Status
	crashLoop := make(chan struct{})
	opts := quietOptions()
	opts.Backoff = pluginmgr.Backoff{Initial: time.Millisecond, Max: 4 * time.Millisecond}
	opts.CrashLoop = pluginmgr.CrashLoopPolicy{MaxFailures: 6, Window: time.Hour}
	opts.OnStatus = func(s pluginmgr.Status) {
		mu.Lock()
		defer mu.Unlock()
		statuses = append(statuses, s)
		if s.State == pluginmgr.StateCrashLoop {
			close(crashLoop)
		}
	}
	p := launch(t, testConfig(t, map[string]any{"exitAfterInventory": true}), opts)
	<-crashLoop

	mu.Lock()
	var delays []time.Duration
	for _, s := range statuses {
		if s.State == pluginmgr.StateRestarting {
			delays = append(delays, s.Delay)
		}
	}
	last := statuses[len(statuses)-1]
	mu.Unlock()
	// Five failures are restarted, the sixth is a crash loop; each restart
	// waits twice as long as the one before, up to the cap.
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 4 * time.Millisecond, 4 * time.Millisecond}
	if !slices.Equal(delays, want) {
		t.Errorf("restart delays = %v, want %v", delays, want)
	}
	if !errors.Is(last.Err, pluginmgr.ErrCrashLoop) || last.Restarts != 5 {
		t.Errorf("crash loop status = %+v", last)
	}
	_, seq := p.Inventory()
	if _, _, err := p.WaitInventory(context.Background(), seq); !errors.Is(err, pluginmgr.ErrCrashLoop) {
		t.Errorf("WaitInventory on a crash-looping plugin = %v, want ErrCrashLoop", err)
	}
	_, err := p.Prepare(context.Background(), []pluginmgr.Claim{claimFor("a", "dev0")})
	if !errors.Is(err, pluginmgr.ErrCrashLoop) || errors.Is(err, pluginmgr.ErrPluginUnavailable) {
		t.Errorf("Prepare on a crash-looping plugin = %v, want ErrCrashLoop (not retryable)", err)
	}
}
