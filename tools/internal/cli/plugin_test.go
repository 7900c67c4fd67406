package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dranode/dranode/pluginmgr/plugintest"
)

// buildBinary builds a main package of a sibling module the way its own tests
// do (GOWORK=off, the module's replaces) into dir.
func buildBinary(t *testing.T, moduleDir, pkg, out string) string {
	t.Helper()
	abs, err := plugintest.Build(context.Background(), moduleDir, pkg, out)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func TestPluginCheck(t *testing.T) {
	dir := t.TempDir()
	gpu := buildBinary(t, "../../../examples", "./gpu", filepath.Join(dir, "gpu-plugin"))
	broken := buildBinary(t, "../../../pluginmgr", "./conformance/testdata/brokenplugin", filepath.Join(dir, "brokenplugin"))

	driverConfig := filepath.Join(dir, "gpu.yaml")
	if err := os.WriteFile(driverConfig, []byte("driverName: gpu.example.com\nnumDevices: 3\ndevRoot: "+filepath.Join(dir, "dev")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The list form, as examples/config/gpu-plugin.yaml has it.
	listConfig := filepath.Join(dir, "list.yaml")
	if err := os.WriteFile(listConfig, []byte("plugins:\n- name: other\n  path: /opt/other\n  config: {}\n- name: gpu\n  path: "+gpu+"\n  config:\n    driverName: gpu.example.com\n    numDevices: 5\n    devRoot: "+filepath.Join(dir, "dev2")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The agent's own configuration shape (plugins.drivers).
	agentConfig := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(agentConfig, []byte("nodeName: x\nplugins:\n  drivers:\n  - name: gpu\n    path: "+gpu+"\n    config:\n      driverName: gpu.example.com\n      numDevices: 4\n      devRoot: "+filepath.Join(dir, "dev3")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name        string
		args        []string
		code        int
		passed      bool
		devices     int
		failedCheck string
	}{
		{name: "example gpu plugin, driver config", args: []string{gpu, "--config", driverConfig}, passed: true, devices: 3},
		{name: "example gpu plugin, plugins list", args: []string{gpu, "--config", listConfig}, passed: true, devices: 5},
		{name: "example gpu plugin, agent config", args: []string{gpu, "--config", agentConfig}, passed: true, devices: 4},
		{name: "broken plugin", args: []string{broken}, code: 1, failedCheck: "Info is valid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := dranodectl(t, append([]string{"plugin", "check", "-o", "json"}, tt.args...)...)
			wantCode(t, r, tt.code)
			rep := mustJSON[pluginReport](t, r)
			if rep.Passed != tt.passed {
				t.Fatalf("passed = %v, want %v: %+v", rep.Passed, tt.passed, rep.Checks)
			}
			if tt.passed {
				if rep.Driver != "gpu.example.com" || rep.Devices != tt.devices {
					t.Errorf("driver %q with %d devices, want gpu.example.com with %d", rep.Driver, rep.Devices, tt.devices)
				}
				for _, c := range rep.Checks {
					if c.Result != "passed" {
						t.Errorf("check %q: %s %v", c.Check, c.Result, c.Failures)
					}
				}
				return
			}
			if !strings.Contains(r.stderr, "not conformant") {
				t.Errorf("stderr: %s", r.stderr)
			}
			found := false
			for _, c := range rep.Checks {
				if c.Check == tt.failedCheck && c.Result == "failed" && len(c.Failures) > 0 {
					found = true
				}
				if c.Check == "other" {
					t.Errorf("failures the report could not place: %v", c.Failures)
				}
			}
			if !found {
				t.Errorf("check %q not reported failed: %+v", tt.failedCheck, rep.Checks)
			}
		})
	}

	t.Run("table", func(t *testing.T) {
		r := dranodectl(t, "plugin", "check", broken)
		wantCode(t, r, 1)
		if !strings.Contains(r.stdout, "VERDICT  FAIL") || !strings.Contains(r.stdout, "failed") {
			t.Errorf("table:\n%s", r.stdout)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		wantCode(t, dranodectl(t, "plugin", "check", filepath.Join(dir, "missing")), 1, "no such file")
		wantCode(t, dranodectl(t, "plugin", "check", gpu, "--config", filepath.Join(dir, "missing.yaml")), 1, "--config")
		notExec := filepath.Join(dir, "not-executable")
		os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644)
		wantCode(t, dranodectl(t, "plugin", "check", notExec), 1, "not executable")
		wantCode(t, dranodectl(t, "plugin", "check"), 2, "missing argument BINARY")
	})
}
