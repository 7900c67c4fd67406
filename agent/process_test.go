package agent

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/dranode/dranode/agent/config"
)

// writeConfigFile writes cfg as the agent's YAML file.
func writeConfigFile(t *testing.T, cfg config.Config) string {
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
	reg := RegistrationSocket(e.cfg.Kubelet.RegistryDir, gpuDriver)
	agent := startAgentProcess(t, bin, writeConfigFile(t, e.cfg), reg)
	k := connectKubelet(t, e.cfg, gpuDriver)
	mustPrepared(t, k.prepare(t, c), c)

	if err := agent.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-agent.done
	if agent.err != nil {
		t.Fatalf("exit after SIGTERM: %v", agent.err)
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
	if entry, err := a.record.Cache().Get(string(c.UID)); err != nil || !entry.PreparedInCurrentBoot() {
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

// agentProcess is the dranode-agent binary run as a DaemonSet runs it.
type agentProcess struct {
	cmd  *exec.Cmd
	logs syncBuffer
	done chan struct{} // closed once the process has exited
	err  error         // its exit status, once done is closed
}

// startAgentProcess runs the agent with the configuration file and waits
// until it serves the registration socket reg; the test fails if it exits
// first. At cleanup a still running agent gets SIGTERM (SIGKILL after 30 s),
// and its output is logged if the test failed.
func startAgentProcess(t *testing.T, bin, configFile, reg string) *agentProcess {
	t.Helper()
	p := &agentProcess{cmd: exec.Command(bin, "--config", configFile), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.logs, &p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				_ = p.cmd.Process.Kill()
			}
		}
		if t.Failed() {
			t.Logf("agent output:\n%s", p.logs.String())
		}
	})
	for {
		if _, err := os.Stat(reg); err == nil {
			return p
		}
		select {
		case <-p.done:
			t.Fatalf("agent exited before serving %s: %v", reg, p.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// syncBuffer is a bytes.Buffer that the process's output copier and the
// test may use at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
