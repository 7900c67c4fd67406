package agent_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dranode/dranode/agent"
	"github.com/dranode/dranode/agent/config"
	"github.com/dranode/dranode/pluginmgr"
)

// The kubelet finds a driver's registration socket in its registry
// directory, and the registration names the DRA socket it calls.
func ExampleRegistrationSocket() {
	cfg := config.Default()
	fmt.Println(agent.RegistrationSocket(cfg.Kubelet.RegistryDir, "gpu.example.com"))
	fmt.Println(agent.DRASocket(cfg.Kubelet.PluginsDir, "gpu.example.com"))
	// Output:
	// /var/lib/kubelet/plugins_registry/gpu.example.com-reg.sock
	// /var/lib/kubelet/plugins/gpu.example.com/dra.sock
}

// VerifyPluginBinary is the check a plugin must pass before the agent runs
// it; a plugin that fails is refused alone, with both digests.
func ExampleVerifyPluginBinary() {
	dir, _ := os.MkdirTemp("", "agent-example-")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "plugin")
	_ = os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755)

	err := agent.VerifyPluginBinary(config.Driver{Name: "gpu", Path: path, SHA256: strings.Repeat("0", 64)})
	var ce *pluginmgr.ChecksumError
	if errors.Is(err, pluginmgr.ErrChecksumMismatch) && errors.As(err, &ce) {
		fmt.Println("expected", ce.Expected[:8], "actual", ce.Actual[:8])
	}
	err = agent.VerifyPluginBinary(config.Driver{Name: "gpu", Path: filepath.Join(dir, "missing"), SHA256: ce.Actual})
	fmt.Println(errors.Is(err, pluginmgr.ErrNotExecutable), errors.Is(err, os.ErrNotExist))
	// Output:
	// expected 00000000 actual a8076d3d
	// true true
}
