package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dranode/dranode/checkpoint/kubeletcompat"
)

// nodeConfig is a standalone configuration whose paths are all under one
// temporary directory; none of its directories exist yet.
func nodeConfig(t *testing.T) Config {
	t.Helper()
	root := t.TempDir()
	boot := filepath.Join(root, "boot_id")
	if err := os.WriteFile(boot, []byte("boot-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	cfg.NodeName = "node-a"
	cfg.StateDir = filepath.Join(root, "state")
	cfg.BootIDFile = boot
	cfg.Kubelet.RegistryDir = filepath.Join(root, "reg")
	cfg.Kubelet.PluginsDir = filepath.Join(root, "plugins")
	cfg.CDI.Dir = filepath.Join(root, "cdi")
	cfg.Claims.Dir = filepath.Join(root, "claims")
	cfg.Slices.DryRunDir = filepath.Join(root, "slices")
	// Port 0: CheckNode binds a port it is given for a moment, and 8085
	// may be a running agent's on a shared machine.
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.Plugins.Drivers = []Driver{{Name: "p", Path: filepath.Join(root, "plugin"), SHA256: strings.Repeat("ab", 32)}}
	return cfg
}

func mkfile(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), mode); err != nil {
		t.Fatal(err)
	}
}

// The error and the checks not made name the key and the path, and every
// failing key is reported, not only the first.
func TestCheckNodeReport(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	cfg := nodeConfig(t)
	mkfile(t, cfg.StateDir, 0o644)
	mkfile(t, cfg.CDI.Dir, 0o644)
	cfg.Kubeconfig = cfg.BootIDFile + ".kubeconfig"
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://10.0.0.1:6443\"}}]\n" +
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {token: t}}]\n"
	if err := os.WriteFile(cfg.Kubeconfig, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	report, err := CheckNode(cfg)
	notChecked := report.NotChecked
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("error %v, want ErrInvalid", err)
	}
	for _, want := range []string{`"stateDir"`, cfg.StateDir + " is not a directory", `"cdi.dir"`, cfg.CDI.Dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	lines := strings.Join(notChecked, "\n")
	for _, want := range []string{"kubeconfig: whether the API server https://10.0.0.1:6443 answers"} {
		if !strings.Contains(lines, want) {
			t.Errorf("not checked:\n%s\ndoes not say %q", lines, want)
		}
	}
	// Cluster mode: the standalone directories are not the agent's.
	if strings.Contains(err.Error(), "slices.dryRunDir") {
		t.Errorf("cluster mode checks slices.dryRunDir: %v", err)
	}
}

// Without write permission (or as root on a read-only file system) the
// kernel's answer is taken; root may write anywhere else, so this case runs
// only as another user (the command's tests run it as one).
func TestCheckNodeNotWritable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root may write any directory; cmd/dranode-agent's TestValidateFindsWhatStartRefuses runs this case as nobody")
	}
	cfg := nodeConfig(t)
	if err := os.Mkdir(cfg.StateDir, 0o555); err != nil {
		t.Fatal(err)
	}
	_, err := CheckNode(cfg)
	var ce *Error
	if !errors.As(err, &ce) || ce.Key != "stateDir" || !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("error %v, want stateDir not writable", err)
	}
}

// What CheckNode says about the HTTP port and the kubelet's checkpoint is
// what it found: the port tried, the checkpoint read as the sweep reads it.
func TestCheckNodeFindings(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	freed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := freed.Addr().String()
	freed.Close()
	_, heldPort, _ := net.SplitHostPort(held.Addr().String())
	_, freePort, _ := net.SplitHostPort(free)
	tests := []struct {
		name    string
		edit    func(t *testing.T, cfg *Config)
		errKey  string // "" for none
		found   string // a line of the report's Found that must be there ("" for none)
		skipped string // a line of its NotChecked that must be there
	}{
		{name: "port held", edit: func(_ *testing.T, cfg *Config) { cfg.HTTP.Address, cfg.Cleanup.Interval = held.Addr().String(), 0 },
			found: "http.address: port " + heldPort + " is in use now"},
		{name: "port free", edit: func(_ *testing.T, cfg *Config) { cfg.HTTP.Address, cfg.Cleanup.Interval = free, 0 },
			found: "http.address: port " + freePort + " is free now"},
		{name: "host name", edit: func(_ *testing.T, cfg *Config) { cfg.HTTP.Address, cfg.Cleanup.Interval = "localhost:8085", 0 },
			skipped: `http.address: whether "localhost" names an address of this machine, and whether port 8085 is free there`},
		{name: "standalone, no kubelet checkpoint", edit: func(*testing.T, *Config) {},
			found: "kubelet.draManagerState: " + "CHECKPOINT does not exist, as expected standalone"},
		{name: "standalone, sweep off, no kubelet checkpoint", edit: func(_ *testing.T, cfg *Config) { cfg.Cleanup.Interval = 0 }},
		{name: "standalone, kubelet checkpoint", edit: func(t *testing.T, cfg *Config) {
			writeEmptyDRAManagerState(t, cfg.Kubelet.DRAManagerState)
		}},
		{name: "kubelet checkpoint damaged", errKey: "kubelet.draManagerState", edit: func(t *testing.T, cfg *Config) {
			mkfile(t, cfg.Kubelet.DRAManagerState, 0o600)
		}},
		{name: "cluster, no kubelet checkpoint", errKey: "kubelet.draManagerState", edit: clusterMode},
		{name: "cluster, sweep off, no kubelet checkpoint", edit: func(t *testing.T, cfg *Config) {
			clusterMode(t, cfg)
			cfg.Cleanup.Interval = 0
		}},
		{name: "cluster, kubelet checkpoint", edit: func(t *testing.T, cfg *Config) {
			clusterMode(t, cfg)
			writeEmptyDRAManagerState(t, cfg.Kubelet.DRAManagerState)
		}},
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := nodeConfig(t)
			cfg.Kubelet.DRAManagerState = filepath.Join(filepath.Dir(cfg.StateDir), "dra_manager_state")
			tt.edit(t, &cfg)
			report, err := CheckNode(cfg)
			var ce *Error
			switch {
			case tt.errKey == "" && err != nil:
				t.Fatalf("CheckNode: %v", err)
			case tt.errKey != "" && (!errors.As(err, &ce) || ce.Key != tt.errKey):
				t.Fatalf("CheckNode error %v, want a *Error naming %q", err, tt.errKey)
			}
			found := strings.ReplaceAll(strings.Join(report.Found, "\n"), cfg.Kubelet.DRAManagerState, "CHECKPOINT")
			if tt.found != "" && !strings.Contains(found, tt.found) {
				t.Errorf("found:\n%s\ndoes not say %q", found, tt.found)
			}
			if !strings.Contains(tt.found, "draManagerState") && strings.Contains(found, "draManagerState") {
				t.Errorf("found:\n%s\nsays something of the kubelet's checkpoint", found)
			}
			if skipped := strings.Join(report.NotChecked, "\n"); !strings.Contains(skipped, tt.skipped) {
				t.Errorf("not checked:\n%s\ndoes not say %q", skipped, tt.skipped)
			}
		})
	}
}

// clusterMode gives cfg a kubeconfig that loads.
func clusterMode(t *testing.T, cfg *Config) {
	t.Helper()
	cfg.Kubeconfig = cfg.BootIDFile + ".kubeconfig"
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://10.0.0.1:6443\"}}]\n" +
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {token: t}}]\n"
	if err := os.WriteFile(cfg.Kubeconfig, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeEmptyDRAManagerState writes a kubelet DRA checkpoint that lists no
// claim, as a kubelet without prepared claims does.
func writeEmptyDRAManagerState(t *testing.T, path string) {
	t.Helper()
	data := fmt.Sprintf(`{"kind":%q,"apiVersion":%q,"ClaimInfoStateList":null}`, kubeletcompat.DRACheckpointKind, kubeletcompat.DRACheckpointAPIVersion)
	file, err := json.Marshal(map[string]any{"Data": data, "Checksum": crc32.ChecksumIEEE([]byte(data))})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := kubeletcompat.ReadDRAManagerState(path); err != nil {
		t.Fatalf("the kubelet checkpoint written does not read back: %v", err)
	}
}

func TestCheckPluginBinaries(t *testing.T) {
	dir := t.TempDir()
	plugin, notExec := filepath.Join(dir, "plugin"), filepath.Join(dir, "not-exec")
	const script = "#!/bin/sh\n"
	if err := os.WriteFile(plugin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(notExec, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(script))
	good := Driver{Name: "p", Path: plugin, SHA256: hex.EncodeToString(sum[:])}
	valid := Default()
	valid.Plugins.Drivers = []Driver{good}
	with := func(f func(*Driver)) Config {
		cfg := valid
		d := good
		f(&d)
		cfg.Plugins.Drivers = []Driver{good, d}
		return cfg
	}
	tests := []struct {
		name        string
		cfg         Config
		wantWarning string
		wantErr     []string
	}{
		{"all good", valid, "", nil},
		{"wrong digest", with(func(d *Driver) { d.Name, d.SHA256 = "x", strings.Repeat("a", 64) }), "",
			[]string{"plugins.drivers[1].sha256", `plugin "x"`, strings.Repeat("a", 64), good.SHA256}},
		{"upper-case digest is the same digest", with(func(d *Driver) { d.Name, d.SHA256 = "x", strings.ToUpper(good.SHA256) }), "", nil},
		{"missing binary is a warning", with(func(d *Driver) { d.Name, d.Path = "x", "/nonexistent/plugin" }),
			"plugins.drivers[1].path: plugin \"x\": /nonexistent/plugin does not exist here", nil},
		{"not executable", with(func(d *Driver) { d.Name, d.Path = "x", notExec }), "",
			[]string{"plugins.drivers[1].path", notExec, "not executable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warnings, err := CheckPluginBinaries(tt.cfg)
			if tt.wantWarning == "" && len(warnings) > 0 || tt.wantWarning != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], tt.wantWarning)) {
				t.Errorf("warnings %q, want %q", warnings, tt.wantWarning)
			}
			if tt.wantErr == nil {
				if err != nil {
					t.Errorf("error %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v, want ErrInvalid", err)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
		})
	}
}
