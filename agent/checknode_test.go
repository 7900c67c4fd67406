package agent

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"k8s.io/klog/v2/ktesting"

	"github.com/dranode/dranode/agent/config"
)

// CheckNode fails a key for each thing on the node Start would refuse, and
// Start refuses it naming the same key. (Cases that need another user than
// root are in cmd/dranode-agent, which runs the command as one.) Both
// parts are here: config.CheckNode and the agent that starts on cfg.
func TestCheckNodeAgreesWithStart(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // standalone, as Start decides
	tests := []struct {
		name string
		edit func(t *testing.T, cfg *config.Config)
		key  string // "" for a configuration the node accepts
		// startKey: the key Start's error names, when Start refuses it
		// (a path it only uses later, such as cdi.dir, is CheckNode's alone).
		startKey string
	}{
		{name: "all paths to be created", edit: func(*testing.T, *config.Config) {}},
		{name: "all paths exist", edit: func(t *testing.T, cfg *config.Config) {
			for _, d := range []string{cfg.StateDir, cfg.Kubelet.RegistryDir, cfg.Kubelet.PluginsDir, cfg.CDI.Dir, cfg.Claims.Dir, cfg.Slices.DryRunDir} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{name: "stateDir is a file", key: "stateDir", startKey: "stateDir", edit: func(t *testing.T, cfg *config.Config) {
			mkfile(t, cfg.StateDir, 0o644)
		}},
		{name: "stateDir under a file", key: "stateDir", startKey: "stateDir", edit: func(t *testing.T, cfg *config.Config) {
			file := filepath.Join(filepath.Dir(cfg.StateDir), "file")
			mkfile(t, file, 0o644)
			cfg.StateDir = filepath.Join(file, "a", "state")
		}},
		{name: "claim record is a file", key: "stateDir", startKey: "stateDir", edit: func(t *testing.T, cfg *config.Config) {
			if err := os.Mkdir(cfg.StateDir, 0o700); err != nil {
				t.Fatal(err)
			}
			mkfile(t, cfg.ClaimRecordDir(), 0o600)
		}},
		{name: "bootIDFile missing", key: "bootIDFile", startKey: "bootIDFile", edit: func(_ *testing.T, cfg *config.Config) {
			cfg.BootIDFile += ".missing"
		}},
		{name: "bootIDFile empty", key: "bootIDFile", startKey: "bootIDFile", edit: func(t *testing.T, cfg *config.Config) {
			if err := os.WriteFile(cfg.BootIDFile, []byte(" \n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "bootIDFile a directory", key: "bootIDFile", startKey: "bootIDFile", edit: func(_ *testing.T, cfg *config.Config) {
			cfg.BootIDFile = filepath.Dir(cfg.BootIDFile)
		}},
		{name: "kubeconfig missing", key: "kubeconfig", startKey: "kubeconfig", edit: func(_ *testing.T, cfg *config.Config) {
			cfg.Kubeconfig = cfg.BootIDFile + ".kubeconfig"
		}},
		{name: "kubeconfig without a cluster", key: "kubeconfig", startKey: "kubeconfig", edit: func(t *testing.T, cfg *config.Config) {
			cfg.Kubeconfig = cfg.BootIDFile + ".kubeconfig"
			if err := os.WriteFile(cfg.Kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "cdi.dir is a file", key: "cdi.dir", edit: func(t *testing.T, cfg *config.Config) {
			mkfile(t, cfg.CDI.Dir, 0o644)
		}},
		{name: "kubelet.registryDir under a file", key: "kubelet.registryDir", edit: func(t *testing.T, cfg *config.Config) {
			mkfile(t, cfg.Kubelet.RegistryDir, 0o644)
			cfg.Kubelet.RegistryDir = filepath.Join(cfg.Kubelet.RegistryDir, "reg")
		}},
		{name: "slices.dryRunDir is a file (standalone)", key: "slices.dryRunDir", edit: func(t *testing.T, cfg *config.Config) {
			mkfile(t, cfg.Slices.DryRunDir, 0o644)
		}},
		{name: "claims.dir is a file (standalone)", key: "claims.dir", edit: func(t *testing.T, cfg *config.Config) {
			mkfile(t, cfg.Claims.Dir, 0o644)
		}},
		{name: "http host not on this machine", key: "http.address", edit: func(_ *testing.T, cfg *config.Config) {
			cfg.HTTP.Address = "192.0.2.1:8085" // TEST-NET-1, never assigned
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t, gpuDriver)
			// None of the agent's directories exists yet.
			if err := os.Remove(e.claimsDir); err != nil {
				t.Fatal(err)
			}
			cfg := e.cfg
			tt.edit(t, &cfg)
			before := listTree(t, e.root)
			report, err := config.CheckNode(cfg)
			notChecked := report.NotChecked
			if after := listTree(t, e.root); after != before {
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
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Key != tt.key {
				t.Fatalf("CheckNode error %v, want a *config.Error naming %q", err, tt.key)
			}
			if tt.startKey == "" {
				return
			}
			err = startOnly(t, cfg)
			var se *config.Error
			switch {
			case errors.As(err, &se):
				if se.Key != tt.startKey {
					t.Errorf("Start error %v names %q, want %q", err, se.Key, tt.startKey)
				}
			// Not in a path: the key may be part of a directory's name.
			case !strings.Contains(strings.ReplaceAll(err.Error(), e.root, ""), tt.startKey):
				t.Errorf("Start error %v does not name %q", err, tt.startKey)
			}
		})
	}
}

// startOnly starts an agent on cfg and returns Start's error; the cases
// that call it fail before any plugin would run.
func startOnly(t *testing.T, cfg config.Config) error {
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

func mkfile(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), mode); err != nil {
		t.Fatal(err)
	}
}
