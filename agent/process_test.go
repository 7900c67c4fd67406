package agent

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// writeConfigFile writes cfg as the agent's YAML file.
func writeConfigFile(t *testing.T, cfg Config) string {
	t.Helper()
	data, err := cfg.YAML()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestProcessSIGTERM runs the dranode-agent binary the way a DaemonSet
// does, prepares a claim, and stops it with SIGTERM: it exits 0, removes its
// sockets, and keeps the record, the CDI spec and the slices.
func TestProcessSIGTERM(t *testing.T) {
	_, bin := binaries(t)
	e := newTestEnv(t, gpuDriver)
	c := claim("default", "proc", "12345678-0000-0000-0000-0000000000ee", "node-a", [2]string{gpuDriver, "gpu-0"})
	e.writeClaim(t, c)
	cmd := exec.Command(bin, "--config", writeConfigFile(t, e.cfg))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if t.Failed() {
			t.Logf("agent output:\n%s", logs.String())
		}
	}()
	reg := RegistrationSocket(e.cfg.Kubelet.RegistryDir, gpuDriver)
	for {
		if _, err := os.Stat(reg); err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("agent exited early: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	k := connectKubelet(t, e.cfg, gpuDriver)
	mustPrepared(t, k.prepare(t, c), c)

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if _, err := os.Stat(reg); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("registration socket left after SIGTERM: %v", err)
	}
	if _, err := os.Stat(specPath(e.cfg, gpuDriver, string(c.UID))); err != nil {
		t.Errorf("CDI spec of a prepared claim removed on SIGTERM: %v", err)
	}
	if files, _ := filepath.Glob(filepath.Join(e.cfg.Slices.DryRunDir, "*.yaml")); len(files) == 0 {
		t.Error("slices removed on SIGTERM")
	}
	// The record survives: a new agent answers from it.
	a := e.start(t, Options{})
	if entry, err := a.cache.Get(string(c.UID)); err != nil || !entry.PreparedInCurrentBoot() {
		t.Errorf("record after SIGTERM: %+v, %v", entry, err)
	}
}

func TestCLIConfigCommands(t *testing.T) {
	_, bin := binaries(t)
	e := newTestEnv(t, gpuDriver)
	file := writeConfigFile(t, e.cfg)

	out, err := exec.Command(bin, "config", "print", "--config", file, "--node-name", "from-flag").CombinedOutput()
	if err != nil {
		t.Fatalf("config print: %v\n%s", err, out)
	}
	var printed map[string]any
	if err := yaml.Unmarshal(out, &printed); err != nil || printed["nodeName"] != "from-flag" {
		t.Errorf("config print: %v, nodeName %v\n%s", err, printed["nodeName"], out)
	}

	out, err = exec.Command(bin, "config", "validate", "--config", file).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "valid") {
		t.Errorf("config validate of a good file: %v\n%s", err, out)
	}

	cmd := exec.Command(bin, "config", "validate", "--config", file)
	cmd.Env = append(os.Environ(), "DRANODE_SLICES_SYNCDELAY=whenever")
	out, err = cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "slices.syncDelay") {
		t.Errorf("config validate with a bad env value: %v\n%s", err, out)
	}
}
