package agent_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/dranode/dranode/agent"
	"github.com/dranode/dranode/pluginmgr"
)

// LoadConfig merges a file, DRANODE_ environment variables and flags; the
// flag wins over the environment, which wins over the file.
func ExampleLoadConfig() {
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
	agent.AddFlags(fs)
	_ = fs.Parse([]string{"--config", file, "--cdi-dir", "/run/cdi"})
	cfg, err := agent.LoadConfig(fs, []string{"DRANODE_NODENAME=from-env"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.NodeName, cfg.CDI.Dir, cfg.StateDir)
	fmt.Println(agent.RegistrationSocket(cfg.Kubelet.RegistryDir, "gpu.example.com"))
	fmt.Println(agent.DRASocket(cfg.Kubelet.PluginsDir, "gpu.example.com"))
	// Output:
	// from-env /run/cdi /var/lib/dranode
	// /var/lib/k8s/plugins_registry/gpu.example.com-reg.sock
	// /var/lib/kubelet/plugins/gpu.example.com/dra.sock
}

// VerifyPluginBinary is the check a plugin must pass before the agent runs
// it; a plugin that fails is refused alone, with both digests.
func ExampleVerifyPluginBinary() {
	dir, _ := os.MkdirTemp("", "agent-example-")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "plugin")
	_ = os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755)

	err := agent.VerifyPluginBinary(agent.DriverConfig{Name: "gpu", Path: path, SHA256: strings.Repeat("0", 64)})
	var ce *pluginmgr.ChecksumError
	if errors.Is(err, pluginmgr.ErrChecksumMismatch) && errors.As(err, &ce) {
		fmt.Println("expected", ce.Expected[:8], "actual", ce.Actual[:8])
	}
	err = agent.VerifyPluginBinary(agent.DriverConfig{Name: "gpu", Path: filepath.Join(dir, "missing"), SHA256: ce.Actual})
	fmt.Println(errors.Is(err, pluginmgr.ErrNotExecutable), errors.Is(err, os.ErrNotExist))
	// Output:
	// expected 00000000 actual a8076d3d
	// true true
}
