package config_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/dranode/dranode/agent/config"
)

// CheckNode finds what the agent would refuse on this machine (here: a
// stateDir that is a file), says what it found that refuses nothing (here:
// the HTTP port in use) and what it cannot check without the API server or
// running the plugins.
func ExampleCheckNode() {
	dir, _ := os.MkdirTemp("", "agent-example-")
	defer os.RemoveAll(dir)
	_ = os.WriteFile(filepath.Join(dir, "boot_id"), []byte("boot-1\n"), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "state"), nil, 0o644)
	_ = os.WriteFile(filepath.Join(dir, "kubeconfig"), []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.1:6443"}}]
users: [{name: u, user: {token: secret}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600)

	cfg := config.Default()
	cfg.NodeName = "node-a"
	cfg.Kubeconfig = filepath.Join(dir, "kubeconfig")
	cfg.BootIDFile = filepath.Join(dir, "boot_id")
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Kubelet.RegistryDir = filepath.Join(dir, "plugins_registry")
	cfg.Kubelet.PluginsDir = filepath.Join(dir, "plugins")
	cfg.CDI.Dir = filepath.Join(dir, "cdi")
	cfg.Claims.Dir = filepath.Join(dir, "claims")
	cfg.Slices.DryRunDir = filepath.Join(dir, "slices")
	// A port in use (held here): the agent could not start.
	held, _ := net.Listen("tcp", "127.0.0.1:0")
	defer held.Close()
	cfg.HTTP.Address = held.Addr().String()
	_, port, _ := net.SplitHostPort(cfg.HTTP.Address)
	cfg.Plugins.Drivers = []config.Driver{{Name: "gpu", Path: "/opt/dranode/gpu-plugin", SHA256: strings.Repeat("ab", 32)}}

	report, err := config.CheckNode(cfg)
	var ce *config.Error
	if errors.As(err, &ce) {
		fmt.Println("refused:", ce.Key)
	}
	for _, line := range report.Found {
		if strings.HasPrefix(line, "http.address:") {
			fmt.Println("found:", strings.Replace(line, port, "PORT", 1))
		}
	}
	for _, line := range report.NotChecked {
		key, _, _ := strings.Cut(line, ":")
		fmt.Println("not checked:", key)
	}
	// Output:
	// refused: stateDir
	// found: http.address: port PORT is in use now: the agent cannot start while it is (an agent running now would hold it)
	// not checked: kubeconfig
	// not checked: plugins.drivers
}

// Load merges a file, DRANODE_ environment variables and flags; the
// flag wins over the environment, which wins over the file.
func ExampleLoad() {
	dir, _ := os.MkdirTemp("", "agent-example-")
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "agent.yaml")
	_ = os.WriteFile(file, []byte(`
nodeName: from-file
kubelet:
  registryDir: /var/lib/k8s/plugins_registry
plugins:
  drivers:
    - path: /opt/dranode/plugins/gpu-plugin
      sha256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
`), 0o644)

	fs := pflag.NewFlagSet("dranode-agent", pflag.ContinueOnError)
	config.AddFlags(fs)
	_ = fs.Parse([]string{"--config", file, "--cdi-dir", "/run/cdi"})
	cfg, err := config.Load(fs, []string{"DRANODE_NODENAME=from-env"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.NodeName, cfg.CDI.Dir, cfg.StateDir)
	fmt.Println(cfg.Kubelet.RegistryDir, cfg.Plugins.Drivers[0].Name)
	// Output:
	// from-env /run/cdi /var/lib/dranode
	// /var/lib/k8s/plugins_registry gpu-plugin
}
