package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dranode/dranode/agent/config"
)

// runAsAgentEnv makes the test binary run main() instead of the tests, so
// the tests run the real command as a process (as another user when the
// test runs as root).
const runAsAgentEnv = "RUN_TEST_BINARY_AS_DRANODE_AGENT"

func TestMain(m *testing.M) {
	if os.Getenv(runAsAgentEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// node is a node's file system under one directory, readable by every user
// so the command can also run as an unprivileged user.
type node struct {
	root, bin string
	cfg       config.Config
}

func newNode(t *testing.T) *node {
	t.Helper()
	root, err := os.MkdirTemp("", "dranode-validate-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	// The command under test is this test binary, copied where another user
	// can run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	n := &node{root: root, bin: filepath.Join(root, "dranode-agent")}
	copyFile(t, self, n.bin, 0o755)
	plugin := filepath.Join(root, "plugin")
	script := []byte("#!/bin/sh\nexit 1\n")
	writeFile(t, plugin, script, 0o755)
	writeFile(t, filepath.Join(root, "boot_id"), []byte("boot-1\n"), 0o644)
	sum := sha256.Sum256(script)
	cfg := config.Default()
	cfg.NodeName = "node-a"
	cfg.StateDir = filepath.Join(root, "state")
	cfg.BootIDFile = filepath.Join(root, "boot_id")
	cfg.Kubelet.RegistryDir = filepath.Join(root, "reg")
	cfg.Kubelet.PluginsDir = filepath.Join(root, "plugins")
	cfg.CDI.Dir = filepath.Join(root, "cdi")
	cfg.Claims.Dir = filepath.Join(root, "claims")
	cfg.Slices.DryRunDir = filepath.Join(root, "slices")
	// Port 0: validate binds a port it is given for a moment, and 8085 may
	// be a running agent's on a shared machine.
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.Plugins.Drivers = []config.Driver{{Name: "p", Path: plugin, SHA256: hex.EncodeToString(sum[:])}}
	n.cfg = cfg
	return n
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, to, data, mode)
}

// run runs the command with args and the node's configuration file, as an
// unprivileged user if asked (and the test can switch users), with no
// DRANODE_ variables and outside any cluster. It returns the output and the
// exit code.
func (n *node) run(t *testing.T, unprivileged bool, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	data, err := n.cfg.YAML()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(n.root, "agent.yaml")
	writeFile(t, file, data, 0o644)
	// A bound on a command that should exit at once: an agent that wrongly
	// starts is stopped and reported, not waited for.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.bin, append(args, "--config", file)...)
	cmd.Env = []string{runAsAgentEnv + "=1", "PATH=" + os.Getenv("PATH")}
	if unprivileged && os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%v did not exit: the agent started?\n%s", args, errOut.String())
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func TestValidateGoodConfig(t *testing.T) {
	n := newNode(t)
	// The HTTP port is in use (held here): said as found, not as "not
	// checked", and not refused (an agent running now would hold it).
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	n.cfg.HTTP.Address = held.Addr().String()
	_, port, _ := net.SplitHostPort(n.cfg.HTTP.Address)
	stdout, stderr, code := n.run(t, false, "config", "validate")
	if code != 0 || !strings.Contains(stdout, "configuration is valid") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	// What needs something the node does not have is said, not passed over.
	if !strings.Contains(stdout, "not checked: plugins.drivers") {
		t.Errorf("validate does not say what it could not check:\n%s", stdout)
	}
	if want := "found: http.address: port " + port + " is in use now"; !strings.Contains(stdout, want) {
		t.Errorf("validate does not say %q:\n%s", want, stdout)
	}
	if strings.Contains(stdout, "whether port") {
		t.Errorf("validate says it did not check the port it checked:\n%s", stdout)
	}
	// Nothing was created.
	for _, dir := range []string{n.cfg.StateDir, n.cfg.Kubelet.RegistryDir, n.cfg.CDI.Dir, n.cfg.Slices.DryRunDir} {
		if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("validate created %s (%v)", dir, err)
		}
	}
}

// Each configuration here is refused by `config validate` naming the key;
// those the agent itself refuses at start are also started, and must be
// refused naming the same key, so the two cannot drift apart.
func TestValidateFindsWhatStartRefuses(t *testing.T) {
	tests := []struct {
		name         string
		edit         func(t *testing.T, n *node)
		unprivileged bool // run as an unprivileged user (root may write anywhere)
		key          string
		startRefuses bool
	}{
		{name: "stateDir is a file", key: "stateDir", startRefuses: true, edit: func(t *testing.T, n *node) {
			writeFile(t, n.cfg.StateDir, nil, 0o644)
		}},
		{name: "stateDir under a file", key: "stateDir", startRefuses: true, edit: func(t *testing.T, n *node) {
			writeFile(t, filepath.Join(n.root, "file"), nil, 0o644)
			n.cfg.StateDir = filepath.Join(n.root, "file", "state")
		}},
		{name: "stateDir not writable", key: "stateDir", startRefuses: true, unprivileged: true, edit: func(t *testing.T, n *node) {
			if err := os.Mkdir(n.cfg.StateDir, 0o555); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "stateDir not creatable", key: "stateDir", startRefuses: true, unprivileged: true, edit: func(t *testing.T, n *node) {
			if err := os.Mkdir(filepath.Join(n.root, "ro"), 0o555); err != nil {
				t.Fatal(err)
			}
			n.cfg.StateDir = filepath.Join(n.root, "ro", "state")
		}},
		{name: "claim record is a file", key: "stateDir", startRefuses: true, edit: func(t *testing.T, n *node) {
			if err := os.Mkdir(n.cfg.StateDir, 0o700); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(n.cfg.StateDir, "claims.record"), nil, 0o600)
		}},
		{name: "bootIDFile missing", key: "bootIDFile", startRefuses: true, edit: func(t *testing.T, n *node) {
			n.cfg.BootIDFile = filepath.Join(n.root, "missing")
		}},
		{name: "bootIDFile empty", key: "bootIDFile", startRefuses: true, edit: func(t *testing.T, n *node) {
			writeFile(t, n.cfg.BootIDFile, []byte("\n"), 0o644)
		}},
		{name: "bootIDFile a directory", key: "bootIDFile", startRefuses: true, edit: func(t *testing.T, n *node) {
			n.cfg.BootIDFile = n.root
		}},
		{name: "bootIDFile not readable", key: "bootIDFile", startRefuses: true, unprivileged: true, edit: func(t *testing.T, n *node) {
			writeFile(t, n.cfg.BootIDFile, []byte("boot-1\n"), 0o600)
		}},
		{name: "kubeconfig missing", key: "kubeconfig", startRefuses: true, edit: func(t *testing.T, n *node) {
			n.cfg.Kubeconfig = filepath.Join(n.root, "missing")
		}},
		{name: "kubeconfig not a kubeconfig", key: "kubeconfig", startRefuses: true, edit: func(t *testing.T, n *node) {
			n.cfg.Kubeconfig = filepath.Join(n.root, "kc")
			writeFile(t, n.cfg.Kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o644)
		}},
		{name: "http port out of range", key: "http.address", startRefuses: true, edit: func(t *testing.T, n *node) {
			n.cfg.HTTP.Address = "127.0.0.1:99999"
		}},
		{name: "cdi.dir is a file", key: "cdi.dir", edit: func(t *testing.T, n *node) {
			writeFile(t, n.cfg.CDI.Dir, nil, 0o644)
		}},
		{name: "kubelet.pluginsDir under a file", key: "kubelet.pluginsDir", edit: func(t *testing.T, n *node) {
			writeFile(t, filepath.Join(n.root, "file"), nil, 0o644)
			n.cfg.Kubelet.PluginsDir = filepath.Join(n.root, "file", "plugins")
		}},
		{name: "kubelet.registryDir not writable", key: "kubelet.registryDir", unprivileged: true, edit: func(t *testing.T, n *node) {
			if err := os.Mkdir(n.cfg.Kubelet.RegistryDir, 0o555); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "claims.dir not a directory (standalone)", key: "claims.dir", edit: func(t *testing.T, n *node) {
			writeFile(t, n.cfg.Claims.Dir, nil, 0o644)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t)
			tt.edit(t, n)
			want := `configuration key "` + tt.key + `"`
			stdout, stderr, code := n.run(t, tt.unprivileged, "config", "validate")
			if code != 1 || !strings.Contains(stderr, want) {
				t.Errorf("config validate: exit %d, want 1 and %s\nstdout:\n%s\nstderr:\n%s", code, want, stdout, stderr)
			}
			if !tt.startRefuses {
				return
			}
			stdout, stderr, code = n.run(t, tt.unprivileged)
			if code != 1 || !strings.Contains(strings.ReplaceAll(stderr, n.root, ""), tt.key) {
				t.Errorf("agent start: exit %d, want 1 and an error naming %s\nstdout:\n%s\nstderr:\n%s", code, tt.key, stdout, stderr)
			}
		})
	}
}

// A command line that cannot be run exits 2 with the usage; a command that
// fails exits 1; help exits 0.
func TestExitStatus(t *testing.T) {
	n := newNode(t)
	file := filepath.Join(n.root, "agent.yaml")
	writeFile(t, file, []byte("nodeName: a\n"), 0o644) // no drivers: refused
	tests := []struct {
		args     []string
		code     int
		inStderr string
	}{
		{[]string{"--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"extra"}, 2, `unknown command "extra"`},
		{[]string{"config"}, 2, "missing subcommand"},
		{[]string{"config", "frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"config", "validate", "extra"}, 2, `unknown command "extra"`},
		{[]string{"config", "print", "--claims-burst"}, 2, "flag needs an argument"},
		{[]string{"config", "print", "--http-pprof=maybe", "--config", file}, 1, `"http.pprof"`},
		{[]string{"config", "validate", "--config", file}, 1, `"plugins.drivers"`},
		{[]string{"--help"}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cmd := exec.Command(n.bin, tt.args...)
			cmd.Env = []string{runAsAgentEnv + "=1", "PATH=" + os.Getenv("PATH")}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code || !strings.Contains(stderr.String(), tt.inStderr) {
				t.Errorf("exit %d, want %d and %q in stderr:\n%s", code, tt.code, tt.inStderr, stderr.String())
			}
			if code == 2 && !strings.Contains(stderr.String(), "Usage:") {
				t.Errorf("usage error without the usage:\n%s", stderr.String())
			}
		})
	}
}

// --help shows each flag's type and default.
func TestHelpShowsTypesAndDefaults(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{
		"--slices-sync-delay duration", "(default 100ms)",
		"--claims-burst int", "(default 100)",
		"--claims-qps float", "(default 50)",
		"--state-dir path", "(default /var/lib/dranode)",
		"--memory-limit quantity", "(default 32Mi)",
		"--slices-unhealthy-taint-effect string", `(default "NoSchedule")`,
		"--http-pprof ", "DRANODE_HTTP_PPROF",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("--help does not show %q:\n%s", want, stdout.String())
		}
	}
}
