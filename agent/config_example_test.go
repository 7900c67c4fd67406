package agent_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dranode/dranode/agent"
)

// CheckNode finds what the agent would refuse on this machine (here: a
// stateDir that is a file) and says what it cannot check without the API
// server or running the plugins.
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

	cfg := agent.DefaultConfig()
	cfg.NodeName = "node-a"
	cfg.Kubeconfig = filepath.Join(dir, "kubeconfig")
	cfg.BootIDFile = filepath.Join(dir, "boot_id")
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Kubelet.RegistryDir = filepath.Join(dir, "plugins_registry")
	cfg.Kubelet.PluginsDir = filepath.Join(dir, "plugins")
	cfg.CDI.Dir = filepath.Join(dir, "cdi")
	cfg.Claims.Dir = filepath.Join(dir, "claims")
	cfg.Slices.DryRunDir = filepath.Join(dir, "slices")
	cfg.HTTP.Address = "127.0.0.1:8085"
	cfg.Plugins.Drivers = []agent.DriverConfig{{Name: "gpu", Path: "/opt/dranode/gpu-plugin", SHA256: strings.Repeat("ab", 32)}}

	notChecked, err := agent.CheckNode(cfg)
	var ce *agent.ConfigError
	if errors.As(err, &ce) {
		fmt.Println("refused:", ce.Key)
	}
	for _, line := range notChecked {
		key, _, _ := strings.Cut(line, ":")
		fmt.Println("not checked:", key)
	}
	// Output:
	// refused: stateDir
	// not checked: kubeconfig
	// not checked: http.address
	// not checked: plugins.drivers
}
