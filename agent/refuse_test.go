package agent

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dranode/dranode/pluginmgr"
)

const badDriver = "bad.example.com"

// twoDriversOneBad is an environment with a good gpu-plugin (plugin gpu0,
// driver gpu.example.com) and one configured with a wrong digest (plugin
// gpu1, driver bad.example.com).
func twoDriversOneBad(t *testing.T) (e *testEnv, wrong, actual string) {
	t.Helper()
	e = newTestEnv(t, gpuDriver, badDriver)
	wrong = strings.Repeat("0", 64)
	actual = e.cfg.Plugins.Drivers[1].SHA256
	e.cfg.Plugins.Drivers[1].SHA256 = wrong
	return e, wrong, actual
}

func TestWrongChecksumRefusesThatPluginOnly(t *testing.T) {
	e, wrong, actual := twoDriversOneBad(t)
	a := e.start(t, Options{})

	refused := a.Refused()
	if len(refused) != 1 || refused[0].Plugin != "gpu1" {
		t.Fatalf("Refused() = %v, want plugin gpu1 alone", refused)
	}
	var ce *pluginmgr.ChecksumError
	if err := refused[0]; !errors.Is(err, ErrPluginRefused) || !errors.Is(err, pluginmgr.ErrChecksumMismatch) || !errors.As(err, &ce) {
		t.Fatalf("refusal %v does not match ErrPluginRefused, ErrChecksumMismatch and *ChecksumError", err)
	}
	if ce.Expected != wrong || ce.Actual != actual {
		t.Errorf("checksum error expected %s actual %s, want %s and %s", ce.Expected, ce.Actual, wrong, actual)
	}
	if got := a.Drivers(); len(got) != 1 || got[0] != gpuDriver {
		t.Errorf("drivers served %v, want only %s", got, gpuDriver)
	}
	if _, err := os.Stat(RegistrationSocket(e.cfg.Kubelet.RegistryDir, badDriver)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("registration socket of the refused driver: %v", err)
	}
	// Slices are written after a short coalescing delay: wait for the good
	// driver's, then check that the refused one has none.
	var slices []string
	for deadline := time.Now().Add(30 * time.Second); len(slices) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		slices, _ = filepath.Glob(filepath.Join(e.cfg.Slices.DryRunDir, "*"))
	}
	if len(slices) == 0 {
		t.Error("the good driver published no slice")
	}
	for _, s := range slices {
		if strings.Contains(filepath.Base(s), badDriver) {
			t.Errorf("slice %s published for the refused driver", s)
		}
	}
	err := a.Ready()
	if err == nil || !strings.Contains(err.Error(), `plugin "gpu1" refused`) || !strings.Contains(err.Error(), wrong) {
		t.Errorf("Ready() = %v, want not ready naming plugin gpu1 and its digest", err)
	}

	// The good driver is served.
	c := claim("default", "good", "00000000-0000-0000-0007-000000000001", "node-a", [2]string{gpuDriver, "gpu-2"})
	e.writeClaim(t, c)
	k := connectKubelet(t, e.cfg, gpuDriver)
	if ids := mustPrepared(t, k.prepare(t, c), c); len(ids) != 1 {
		t.Errorf("CDI IDs %v, want one", ids)
	}
	_, metrics := get(t, "http://"+a.HTTPAddr()+"/metrics")
	for _, want := range []string{`dranode_plugin_refused{plugin="gpu0"} 0`, `dranode_plugin_refused{plugin="gpu1"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestMissingBinaryRefusedAlone(t *testing.T) {
	e := newTestEnv(t, gpuDriver, badDriver)
	e.cfg.Plugins.Drivers[1].Path = filepath.Join(e.root, "no-such-plugin")
	e.cfg.Plugins.Drivers[1].Name = "" // a configuration built in code: named after the binary
	a := e.start(t, Options{})
	refused := a.Refused()
	if len(refused) != 1 || !errors.Is(refused[0], pluginmgr.ErrNotExecutable) || refused[0].Plugin != "no-such-plugin" || !strings.Contains(refused[0].Error(), e.cfg.Plugins.Drivers[1].Path) {
		t.Fatalf("Refused() = %v, want no-such-plugin refused as not executable naming its path", refused)
	}
	if got := a.Drivers(); len(got) != 1 || got[0] != gpuDriver {
		t.Errorf("drivers served %v, want only %s", got, gpuDriver)
	}
}

// pluginmgr's start errors: a plugin whose binary cannot be trusted is
// refused alone; other start errors, and a mismatch not attributed to a
// configured plugin, stay fatal.
func TestRefuseUntrustedBinary(t *testing.T) {
	e := newTestEnv(t, gpuDriver, badDriver)
	a, err := New(e.cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := e.cfg.Plugins.Drivers[1]
	replaced := &pluginmgr.StartError{Plugin: d.Name, Err: fmt.Errorf("plugin %q: %w", d.Name, &pluginmgr.ChecksumError{Path: d.Path, Expected: d.SHA256, Actual: strings.Repeat("1", 64)})}
	other := &pluginmgr.StartError{Plugin: "gpu0", Err: fmt.Errorf("plugin %q: %w", "gpu0", pluginmgr.ErrStartTimeout)}
	tests := []struct {
		name      string
		startErr  error
		wantFatal error
	}{
		{"replaced binary only", errors.Join(replaced), nil},
		{"replaced binary and a timeout", errors.Join(replaced, other), pluginmgr.ErrStartTimeout},
		{"a mismatch of a binary not configured", &pluginmgr.StartError{Plugin: "elsewhere", Err: &pluginmgr.ChecksumError{Path: "/elsewhere", Expected: d.SHA256}}, pluginmgr.ErrChecksumMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a.drivers.refused = nil
			err := a.refuseUntrusted(tt.startErr)
			if tt.wantFatal == nil && err != nil || tt.wantFatal != nil && !errors.Is(err, tt.wantFatal) {
				t.Errorf("refuseUntrusted = %v, want %v", err, tt.wantFatal)
			}
			if tt.name != "a mismatch of a binary not configured" && !a.isRefused(d.Name) {
				t.Errorf("plugin %s not refused", d.Name)
			}
			if a.isRefused("gpu0") {
				t.Error("plugin gpu0 refused for a start timeout")
			}
		})
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestProcessRefusesBadPluginServesOthers runs the dranode-agent binary as a
// DaemonSet would, with two plugins of which one has a wrong digest: the
// process keeps running, the good driver registers and prepares, the bad
// one never gets a socket, and the refusal is in the log (both digests),
// /readyz and /metrics. `config validate` rejects the same file.
func TestProcessRefusesBadPluginServesOthers(t *testing.T) {
	_, bin := binaries(t)
	e, wrong, actual := twoDriversOneBad(t)
	e.cfg.HTTP.Address = freeAddr(t)
	file := writeConfigFile(t, e.cfg)

	out, err := exec.Command(bin, "config", "validate", "--config", file).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "plugins.drivers[1].sha256") ||
		!strings.Contains(string(out), wrong) || !strings.Contains(string(out), actual) {
		t.Errorf("config validate with a wrong digest: %v\n%s", err, out)
	}

	c := claim("default", "proc-good", "12345678-0000-0000-0007-0000000000ee", "node-a", [2]string{gpuDriver, "gpu-0"})
	e.writeClaim(t, c)
	agent := startAgentProcess(t, bin, file, RegistrationSocket(e.cfg.Kubelet.RegistryDir, gpuDriver))
	k := connectKubelet(t, e.cfg, gpuDriver)
	mustPrepared(t, k.prepare(t, c), c)

	if _, err := os.Stat(RegistrationSocket(e.cfg.Kubelet.RegistryDir, badDriver)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("registration socket of the refused driver: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.Kubelet.PluginsDir, badDriver)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("DRA socket directory of the refused driver: %v", err)
	}
	base := "http://" + e.cfg.HTTP.Address
	code, body := getRetry(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `plugin "gpu1" refused`) {
		t.Errorf("/readyz %d %q, want 503 naming plugin gpu1", code, body)
	}
	if _, metrics := get(t, base+"/metrics"); !strings.Contains(metrics, `dranode_plugin_refused{plugin="gpu1"} 1`) {
		t.Errorf("/metrics lacks the refusal of gpu1")
	}
	log := agent.logs.String()
	for _, want := range []string{"Driver plugin refused", `plugin="gpu1"`, wrong, actual} {
		if !strings.Contains(log, want) {
			t.Errorf("agent log does not contain %q", want)
		}
	}
	// No gpu-plugin process was started for the refused driver: the only
	// child is the good one.
	if n := childCount(t, agent.cmd.Process.Pid); n != 1 {
		t.Errorf("agent has %d child processes, want 1 (the good plugin)", n)
	}
}

// getRetry is get, retried while the endpoint is not listening yet.
func getRetry(t *testing.T, url string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return get(t, url)
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// childCount counts the live child processes of parent: children are
// listed per thread, and Go starts them from any thread.
func childCount(t *testing.T, parent int) int {
	t.Helper()
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", parent))
	if err != nil || len(files) == 0 {
		t.Skipf("cannot list children of %d: %v", parent, err)
	}
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended meanwhile
		}
		n += len(strings.Fields(string(data)))
	}
	return n
}
