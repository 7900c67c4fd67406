package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dranode/dranode/pluginmgr/plugintest"
)

// Binaries are the agent and the example driver plugin, built from this
// repository.
type Binaries struct {
	Agent     string // dranode-agent
	GPUPlugin string // gpu-plugin (examples/gpu)
}

// BuildBinaries builds dranode-agent (agent/cmd/dranode-agent) and
// gpu-plugin (examples/gpu) from the repository at repoRoot into dir, each
// module on its own (plugintest.Build). A failure is a
// *plugintest.BuildError.
func BuildBinaries(repoRoot, dir string) (Binaries, error) {
	b := Binaries{Agent: filepath.Join(dir, "dranode-agent"), GPUPlugin: filepath.Join(dir, "gpu-plugin")}
	for _, job := range []struct{ module, pkg, out string }{
		{"agent", "./cmd/dranode-agent", b.Agent},
		{"examples", "./gpu", b.GPUPlugin},
	} {
		if _, err := plugintest.Build(context.Background(), filepath.Join(repoRoot, job.module), job.pkg, job.out); err != nil {
			return Binaries{}, err
		}
	}
	return b, nil
}

// FileSHA256 is the hex SHA-256 of a file, as the agent's config wants it.
func FileSHA256(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("checksum: %w", err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// GPUDriver is one gpu-plugin instance in the agent's configuration.
type GPUDriver struct {
	DriverName string
	NumDevices int
	SHA256     string // empty: the plugin binary's real digest
	// PrepareKeepsState makes the plugin report a Prepare that is not
	// stateless (its statelessPrepare: false), so that the agent records
	// a claim before calling it, as for a driver that changes the node.
	PrepareKeepsState bool
}

// AgentOptions describe one agent on one node. Directories are created
// under Dir when left empty.
type AgentOptions struct {
	Bins       Binaries
	Dir        string // the node's root for this agent's files
	NodeName   string
	Kubeconfig string
	// RegistryDir and PluginsDir are shared with the kubelet.
	RegistryDir string
	PluginsDir  string
	Drivers     []GPUDriver
	// SyncDelay is slices.syncDelay, the window in which slice changes
	// are coalesced; zero leaves the agent's default.
	SyncDelay time.Duration
	// ClaimsQPS and ClaimsBurst set claims.qps and claims.burst (the
	// agent's client for claim lookups); zero leaves the agent's default.
	ClaimsQPS   float32
	ClaimsBurst int
	// Log, when set, also receives the agent's output.
	Log io.Writer
	// InstanceID is kubelet.instanceID (rolling upgrades); empty leaves
	// the agent's default.
	InstanceID string
	// Env is added to the agent's environment (Process.Env: the test's
	// own DRANODE_ variables are not passed on), e.g. DRANODE_HTTP_PPROF.
	Env []string
}

// Agent is a dranode-agent process and the files it owns. Its plugins run
// in its process group: Kill ends the agent alone (they notice the broken
// connection themselves, as after a crash), Stop ends them too.
type Agent struct {
	*Process
	Opts       AgentOptions
	ConfigPath string
	StateDir   string
	CDIDir     string
	BootIDFile string
	DevRoot    string
	HTTPAddr   string
}

// NewAgent lays out the agent's directories and writes its configuration;
// Start runs it.
func NewAgent(o AgentOptions) (*Agent, error) {
	a := &Agent{
		Opts:       o,
		ConfigPath: filepath.Join(o.Dir, "agent.yaml"),
		StateDir:   filepath.Join(o.Dir, "state"),
		CDIDir:     filepath.Join(o.Dir, "cdi"),
		BootIDFile: filepath.Join(o.Dir, "boot_id"),
		DevRoot:    filepath.Join(o.Dir, "dev"),
	}
	// The agent's plugins make their socket directories in TMPDIR, and an
	// agent a test kills cannot remove them: under the agent's directory
	// they go with the test's files. o.Env comes after, so a test may
	// still choose its own.
	tmp := filepath.Join(o.Dir, "tmp")
	a.Process = &Process{
		Path: o.Bins.Agent, Args: []string{"--config", a.ConfigPath},
		LogPath: filepath.Join(o.Dir, "agent.log"), Output: o.Log,
		Env: append([]string{"TMPDIR=" + tmp}, o.Env...),
	}
	for _, d := range []string{o.Dir, tmp, a.StateDir, a.CDIDir, o.RegistryDir, o.PluginsDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("agent dirs: %w", err)
		}
	}
	if err := a.SetBootID("boot-1"); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	a.HTTPAddr = "127.0.0.1:" + strconv.Itoa(port)
	if err := a.WriteConfig(); err != nil {
		return nil, err
	}
	return a, nil
}

// SetBootID writes the boot ID file the agent reads; a different value is
// what the agent sees after a reboot.
func (a *Agent) SetBootID(id string) error {
	if err := os.WriteFile(a.BootIDFile, []byte(id+"\n"), 0o644); err != nil {
		return fmt.Errorf("boot id file: %w", err)
	}
	return nil
}

// WriteConfig writes the configuration for the current options. JSON is
// YAML, and keeps the harness free of a YAML encoder.
func (a *Agent) WriteConfig() error {
	o := a.Opts
	pluginSum, err := FileSHA256(o.Bins.GPUPlugin)
	if err != nil {
		return err
	}
	type driver struct {
		Name   string         `json:"name"`
		Path   string         `json:"path"`
		SHA256 string         `json:"sha256"`
		Args   []string       `json:"args"`
		Config map[string]any `json:"config"`
	}
	var drivers []driver
	for _, d := range o.Drivers {
		sum := d.SHA256
		if sum == "" {
			sum = pluginSum
		}
		drivers = append(drivers, driver{
			// Plugin names must differ; the binary's name (the default)
			// is the same for every instance.
			Name: strings.ReplaceAll(d.DriverName, ".", "-"),
			Path: o.Bins.GPUPlugin, SHA256: sum, Args: []string{},
			Config: map[string]any{
				"driverName": d.DriverName,
				"numDevices": d.NumDevices,
				"devRoot":    filepath.Join(a.DevRoot, d.DriverName),
				// statelessPrepare: the plugin's own default is true
				"statelessPrepare": !d.PrepareKeepsState,
			},
		})
	}
	cfg := map[string]any{
		"nodeName":   o.NodeName,
		"kubeconfig": o.Kubeconfig,
		"stateDir":   a.StateDir,
		"bootIDFile": a.BootIDFile,
		"kubelet":    map[string]any{"registryDir": o.RegistryDir, "pluginsDir": o.PluginsDir, "instanceID": o.InstanceID},
		"cdi":        map[string]any{"dir": a.CDIDir},
		"plugins":    map[string]any{"drivers": drivers},
		"http":       map[string]any{"address": a.HTTPAddr},
	}
	if o.ClaimsQPS != 0 || o.ClaimsBurst != 0 {
		claims := map[string]any{}
		if o.ClaimsQPS != 0 {
			claims["qps"] = o.ClaimsQPS
		}
		if o.ClaimsBurst != 0 {
			claims["burst"] = o.ClaimsBurst
		}
		cfg["claims"] = claims
	}
	if o.SyncDelay != 0 {
		cfg["slices"] = map[string]any{"syncDelay": o.SyncDelay.String()}
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	if err := os.WriteFile(a.ConfigPath, data, 0o644); err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	return nil
}

// ErrAgentExited is returned when the agent process ended while the harness
// waited for it to do something; it matches ErrProcessExited.
var ErrAgentExited = fmt.Errorf("dranode-agent: %w", ErrProcessExited)

// WaitReady waits until /readyz answers 200: every plugin up and
// registered.
func (a *Agent) WaitReady(ctx context.Context, timeout time.Duration) error {
	exit := a.Exited()
	return Poll(ctx, 50*time.Millisecond, timeout, "agent /readyz", func(ctx context.Context) (bool, error) {
		select {
		case <-exit:
			return false, fmt.Errorf("%w: %v; log:\n%s", ErrAgentExited, a.ExitError(), a.LogTail(30))
		default:
		}
		body, code, err := a.get(ctx, "/readyz")
		if err != nil {
			return false, err
		}
		if code != http.StatusOK {
			return false, fmt.Errorf("/readyz %d: %s", code, body)
		}
		return true, nil
	})
}

// Ready reports whether /readyz answers 200 now.
func (a *Agent) Ready(ctx context.Context) (bool, error) {
	_, code, err := a.get(ctx, "/readyz")
	if err != nil {
		return false, fmt.Errorf("agent /readyz: %w", err)
	}
	return code == http.StatusOK, nil
}

func (a *Agent) get(ctx context.Context, path string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.HTTPAddr+path, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return body, resp.StatusCode, err
}

// Metrics scrapes the agent's /metrics.
func (a *Agent) Metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	body, code, err := a.get(ctx, "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scrape agent metrics: %w", err)
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("scrape agent metrics: status %d: %s", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse agent metrics: %w", err)
	}
	return families, nil
}

// PluginPIDs lists the agent's child processes running the gpu-plugin
// binary.
func (a *Agent) PluginPIDs() ([]int, error) {
	parent := a.PID()
	if parent == 0 {
		return nil, errors.New("agent not running")
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue // gone meanwhile
		}
		if ppid, ok := statusField(string(status), "PPid"); !ok || ppid != strconv.Itoa(parent) {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == a.Opts.Bins.GPUPlugin {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// RSSBytes is VmRSS of a process, from /proc/<pid>/status.
func RSSBytes(pid int) (int64, error) {
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, fmt.Errorf("rss of %d: %w", pid, err)
	}
	v, ok := statusField(string(status), "VmRSS")
	if !ok {
		return 0, fmt.Errorf("rss of %d: no VmRSS line", pid)
	}
	kb, err := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("rss of %d: VmRSS %q: %w", pid, v, err)
	}
	return kb * 1024, nil
}

func statusField(status, key string) (string, bool) {
	for _, line := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
