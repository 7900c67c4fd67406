package agent

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"k8s.io/klog/v2/ktesting"
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
	cfg := DefaultConfig()
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
	cfg.Plugins.Drivers = []DriverConfig{{Name: "p", Path: filepath.Join(root, "plugin"), SHA256: strings.Repeat("ab", 32)}}
	return cfg
}

func mkfile(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), mode); err != nil {
		t.Fatal(err)
	}
}

// CheckNode fails a key for each thing on the node Start would refuse, and
// Start refuses it naming the same key. (Cases that need another user than
// root are in cmd/dranode-agent, which runs the command as one.)
func TestCheckNodeAgreesWithStart(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // standalone, as Start decides
	tests := []struct {
		name string
		edit func(t *testing.T, cfg *Config)
		key  string // "" for a configuration the node accepts
		// startKey: the key Start's error names, when Start refuses it
		// (a path it only uses later, such as cdi.dir, is CheckNode's alone).
		startKey string
	}{
		{name: "all paths to be created", edit: func(*testing.T, *Config) {}},
		{name: "all paths exist", edit: func(t *testing.T, cfg *Config) {
			for _, d := range []string{cfg.StateDir, cfg.Kubelet.RegistryDir, cfg.Kubelet.PluginsDir, cfg.CDI.Dir, cfg.Claims.Dir, cfg.Slices.DryRunDir} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{name: "stateDir is a file", key: "stateDir", startKey: "stateDir", edit: func(t *testing.T, cfg *Config) {
			mkfile(t, cfg.StateDir, 0o644)
		}},
		{name: "stateDir under a file", key: "stateDir", startKey: "stateDir", edit: func(t *testing.T, cfg *Config) {
			file := filepath.Join(filepath.Dir(cfg.StateDir), "file")
			mkfile(t, file, 0o644)
			cfg.StateDir = filepath.Join(file, "a", "state")
		}},
		{name: "claim record is a file", key: "stateDir", startKey: "stateDir", edit: func(t *testing.T, cfg *Config) {
			if err := os.Mkdir(cfg.StateDir, 0o700); err != nil {
				t.Fatal(err)
			}
			mkfile(t, filepath.Join(cfg.StateDir, claimRecordDir), 0o600)
		}},
		{name: "bootIDFile missing", key: "bootIDFile", startKey: "bootIDFile", edit: func(_ *testing.T, cfg *Config) {
			cfg.BootIDFile += ".missing"
		}},
		{name: "bootIDFile empty", key: "bootIDFile", startKey: "bootIDFile", edit: func(t *testing.T, cfg *Config) {
			if err := os.WriteFile(cfg.BootIDFile, []byte(" \n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "bootIDFile a directory", key: "bootIDFile", startKey: "bootIDFile", edit: func(_ *testing.T, cfg *Config) {
			cfg.BootIDFile = filepath.Dir(cfg.BootIDFile)
		}},
		{name: "kubeconfig missing", key: "kubeconfig", startKey: "kubeconfig", edit: func(_ *testing.T, cfg *Config) {
			cfg.Kubeconfig = cfg.BootIDFile + ".kubeconfig"
		}},
		{name: "kubeconfig without a cluster", key: "kubeconfig", startKey: "kubeconfig", edit: func(t *testing.T, cfg *Config) {
			cfg.Kubeconfig = cfg.BootIDFile + ".kubeconfig"
			if err := os.WriteFile(cfg.Kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "cdi.dir is a file", key: "cdi.dir", edit: func(t *testing.T, cfg *Config) {
			mkfile(t, cfg.CDI.Dir, 0o644)
		}},
		{name: "kubelet.registryDir under a file", key: "kubelet.registryDir", edit: func(t *testing.T, cfg *Config) {
			mkfile(t, cfg.Kubelet.RegistryDir, 0o644)
			cfg.Kubelet.RegistryDir = filepath.Join(cfg.Kubelet.RegistryDir, "reg")
		}},
		{name: "slices.dryRunDir is a file (standalone)", key: "slices.dryRunDir", edit: func(t *testing.T, cfg *Config) {
			mkfile(t, cfg.Slices.DryRunDir, 0o644)
		}},
		{name: "claims.dir is a file (standalone)", key: "claims.dir", edit: func(t *testing.T, cfg *Config) {
			mkfile(t, cfg.Claims.Dir, 0o644)
		}},
		{name: "http host not on this machine", key: "http.address", edit: func(_ *testing.T, cfg *Config) {
			cfg.HTTP.Address = "192.0.2.1:8085" // TEST-NET-1, never assigned
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := nodeConfig(t)
			tt.edit(t, &cfg)
			before := listTree(t, filepath.Dir(cfg.BootIDFile))
			report, err := CheckNode(cfg)
			notChecked := report.NotChecked
			if after := listTree(t, filepath.Dir(cfg.BootIDFile)); after != before {
				t.Errorf("CheckNode changed the node:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			if !strings.Contains(strings.Join(notChecked, "\n"), "plugins.drivers") {
				t.Errorf("not checked %q: the plugins' start is not listed", notChecked)
			}
			if tt.key == "" {
				if err != nil {
					t.Fatalf("CheckNode: %v", err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Key != tt.key {
				t.Fatalf("CheckNode error %v, want a *ConfigError naming %q", err, tt.key)
			}
			if tt.startKey == "" {
				return
			}
			err = startOnly(t, cfg)
			var se *ConfigError
			switch {
			case errors.As(err, &se):
				if se.Key != tt.startKey {
					t.Errorf("Start error %v names %q, want %q", err, se.Key, tt.startKey)
				}
			// Not in a path: the temporary directories are named after the test.
			case !strings.Contains(strings.ReplaceAll(err.Error(), filepath.Dir(t.TempDir()), ""), tt.startKey):
				t.Errorf("Start error %v does not name %q", err, tt.startKey)
			}
		})
	}
}

// startOnly starts an agent on cfg and returns Start's error; the cases
// that call it fail before any plugin would run.
func startOnly(t *testing.T, cfg Config) error {
	t.Helper()
	a, err := New(cfg, Options{Logger: ktesting.NewLogger(t, ktesting.NewConfig()), PluginLogger: hclog.NewNullLogger()})
	if err != nil {
		return err
	}
	err = a.Start(context.Background())
	if err == nil {
		_ = a.Stop()
		t.Fatal("Start accepted the configuration")
	}
	return err
}

// listTree lists every path under root with its mode, to see that nothing
// was created or changed.
func listTree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b.WriteString(fi.Mode().String() + " " + path + "\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
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
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("error %v, want ErrInvalidConfig", err)
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
	var ce *ConfigError
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
			writeDRAManagerState(t, cfg.Kubelet.DRAManagerState, nil)
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
			writeDRAManagerState(t, cfg.Kubelet.DRAManagerState, nil)
		}},
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := nodeConfig(t)
			cfg.Kubelet.DRAManagerState = filepath.Join(filepath.Dir(cfg.StateDir), "dra_manager_state")
			tt.edit(t, &cfg)
			report, err := CheckNode(cfg)
			var ce *ConfigError
			switch {
			case tt.errKey == "" && err != nil:
				t.Fatalf("CheckNode: %v", err)
			case tt.errKey != "" && (!errors.As(err, &ce) || ce.Key != tt.errKey):
				t.Fatalf("CheckNode error %v, want a *ConfigError naming %q", err, tt.errKey)
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
