package cli

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dranode/dranode/cdi"
)

const agentModule = "../../../agent"

// syncBuffer collects a child's output from its copying goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// standaloneAgent is a real dranode-agent with the example GPU plugin, in
// standalone mode: claims from a directory, slices to files, every kubelet
// path under one temporary directory.
type standaloneAgent struct {
	registryDir string
	cdiDir      string
	stateDir    string
	claimUID    string
}

const testClaimUID = "6c0b5a4e-0d3f-4b8e-9a51-3c2f1d7e8a90"

func startStandaloneAgent(t *testing.T) *standaloneAgent {
	t.Helper()
	if _, err := os.Stat(filepath.Join(agentModule, "cmd", "dranode-agent")); err != nil {
		t.Fatalf("the agent (agent/cmd/dranode-agent) is missing: %v", err)
	}
	// Unix socket paths are limited to 108 bytes: keep the root short.
	root, err := os.MkdirTemp("", "dctl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	bin := filepath.Join(root, "bin")
	agentBin := buildBinary(t, agentModule, "./cmd/dranode-agent", filepath.Join(bin, "dranode-agent"))
	gpu := buildBinary(t, "../../../examples", "./gpu", filepath.Join(bin, "gpu-plugin"))
	sum, err := fileSHA256(gpu)
	if err != nil {
		t.Fatal(err)
	}
	a := &standaloneAgent{
		registryDir: filepath.Join(root, "registry"),
		cdiDir:      filepath.Join(root, "cdi"),
		stateDir:    filepath.Join(root, "state"),
		claimUID:    testClaimUID,
	}
	claims := filepath.Join(root, "claims")
	if err := os.MkdirAll(claims, 0o755); err != nil {
		t.Fatal(err)
	}
	claim := `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {namespace: default, name: gpu-claim, uid: ` + testClaimUID + `}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.example.com}
status:
  allocation:
    devices:
      results:
      - {request: gpu, driver: gpu.example.com, pool: dranode-test, device: gpu-1}
    nodeSelector:
      nodeSelectorTerms:
      - matchFields:
        - {key: metadata.name, operator: In, values: [dranode-test]}
`
	if err := os.WriteFile(filepath.Join(claims, "gpu-claim.yaml"), []byte(claim), 0o644); err != nil {
		t.Fatal(err)
	}
	config := `nodeName: dranode-test
stateDir: ` + a.stateDir + `
kubelet:
  registryDir: ` + a.registryDir + `
  pluginsDir: ` + filepath.Join(root, "plugins") + `
cdi:
  dir: ` + a.cdiDir + `
claims:
  dir: ` + claims + `
slices:
  dryRunDir: ` + filepath.Join(root, "slices") + `
http:
  address: ""
plugins:
  drivers:
  - name: gpu
    path: ` + gpu + `
    sha256: "` + sum + `"
    config:
      driverName: gpu.example.com
      numDevices: 2
      devRoot: ` + filepath.Join(root, "dev") + `
`
	cfgPath := filepath.Join(root, "agent.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(agentBin, "--config", cfgPath)
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	})
	// The agent is ready for the kubelet once its registration socket
	// exists. The bound is a hang guard, not a speed requirement.
	sock := filepath.Join(a.registryDir, "gpu.example.com-reg.sock")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(sock); err == nil {
			return a
		}
		select {
		case err := <-exited:
			t.Fatalf("agent exited before registering: %v\n%s", err, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent did not create %s\n%s", sock, logs.String())
		}
	}
}

func TestKubeletPrepareUnprepareAgainstAgent(t *testing.T) {
	a := startStandaloneAgent(t)
	claim := "default/gpu-claim/" + a.claimUID

	r := dranodectl(t, "kubelet", "prepare", "--registry-dir", a.registryDir, "--driver", "gpu.example.com", "--claim", claim, "-o", "json")
	wantCode(t, r, 0)
	rep := mustJSON[kubeletReport](t, r)
	if len(rep.Claims) != 1 || len(rep.Claims[0].Devices) != 1 {
		t.Fatalf("prepare result %+v", rep)
	}
	dev := rep.Claims[0].Devices[0]
	if dev.Pool != "dranode-test" || dev.Device != "gpu-1" || len(dev.CDIDeviceIDs) == 0 {
		t.Fatalf("prepared %+v, want dranode-test/gpu-1 with CDI IDs", dev)
	}
	if rep.Endpoint == "" || !strings.HasSuffix(rep.Registration, "gpu.example.com-reg.sock") {
		t.Errorf("sockets: registration %q endpoint %q", rep.Registration, rep.Endpoint)
	}
	// Every CDI ID the kubelet would hand the runtime is defined by a valid
	// spec in the agent's CDI directory.
	v := dranodectl(t, "cdi", "validate", a.cdiDir, "-o", "json")
	wantCode(t, v, 0)
	defined := map[string]bool{}
	for _, s := range mustJSON[validateReport](t, v).Specs {
		for _, d := range s.Devices {
			defined[cdi.QualifiedName(strings.Split(s.Kind, "/")[0], strings.Split(s.Kind, "/")[1], d)] = true
		}
	}
	for _, id := range dev.CDIDeviceIDs {
		if !defined[id] {
			t.Errorf("CDI device %s is in no spec of %s (%v)", id, a.cdiDir, defined)
		}
	}

	// The agent's claim record, read while the agent runs, holds the claim
	// as Prepared with the same CDI IDs.
	record := filepath.Join(a.stateDir, "claims.record")
	ir := dranodectl(t, "checkpoint", "inspect", record, "-o", "json")
	wantCode(t, ir, 0)
	var stored struct {
		State   string
		Drivers []struct {
			Devices []struct{ CDIDeviceIDs []string }
		}
	}
	if raw := mustJSON[checkpointReport](t, ir).Journal.State[a.claimUID]; json.Unmarshal(raw, &stored) != nil || stored.State != "Prepared" ||
		len(stored.Drivers) != 1 || len(stored.Drivers[0].Devices) != 1 || !slices.Equal(stored.Drivers[0].Devices[0].CDIDeviceIDs, dev.CDIDeviceIDs) {
		t.Errorf("claim record holds %s, want the claim Prepared with %v", raw, dev.CDIDeviceIDs)
	}

	// The agent's spec is the driver's, as cdi sweep --driver selects it:
	// a dry run that ignores the record lists exactly that file; one that
	// reads the running agent's record keeps it, with no --keep; so does
	// --keep.
	sw := dranodectl(t, "cdi", "sweep", "--dir", a.cdiDir, "--driver", "gpu.example.com", "--ignore-record", "-o", "json")
	wantCode(t, sw, 0)
	agentSpecs, _ := filepath.Glob(filepath.Join(a.cdiDir, "*.json"))
	if got := mustJSON[sweepReport](t, sw).Removed; len(agentSpecs) != 1 || !slices.Equal(got, agentSpecs) {
		t.Errorf("sweep --driver gpu.example.com lists %v; the agent wrote %v", got, agentSpecs)
	}
	sw = dranodectl(t, "cdi", "sweep", "--dir", a.cdiDir, "--driver", "gpu.example.com", "--record", record, "-o", "json")
	wantCode(t, sw, 0)
	if rep := mustJSON[sweepReport](t, sw); len(rep.Removed) != 0 || !slices.Equal(rep.Recorded, []string{a.claimUID}) {
		t.Errorf("sweep reading the agent's record lists %v (recorded %v); want nothing, %s recorded", rep.Removed, rep.Recorded, a.claimUID)
	}
	sw = dranodectl(t, "cdi", "sweep", "--dir", a.cdiDir, "--driver", "gpu.example.com", "--keep", a.claimUID, "--ignore-record", "-o", "json")
	if got := mustJSON[sweepReport](t, sw).Removed; len(got) != 0 {
		t.Errorf("sweep keeping the claim lists %v", got)
	}

	// Preparing again is answered from the agent's record: same devices. The
	// registry directory is given relative to the working directory this
	// time, as a user in the repository root would type it.
	t.Chdir(filepath.Dir(a.registryDir))
	again := mustJSON[kubeletReport](t, dranodectl(t, "kubelet", "prepare", "--registry-dir", filepath.Base(a.registryDir), "--driver", "gpu.example.com", "--claim", claim, "-o", "json"))
	if len(again.Claims) != 1 || len(again.Claims[0].Devices) != 1 || strings.Join(again.Claims[0].Devices[0].CDIDeviceIDs, ",") != strings.Join(dev.CDIDeviceIDs, ",") {
		t.Errorf("second prepare %+v differs from the first %+v", again, rep)
	}

	u := dranodectl(t, "kubelet", "unprepare", "--registry-dir", a.registryDir, "--driver", "gpu.example.com", "--claim", claim, "-o", "json")
	wantCode(t, u, 0)
	if ur := mustJSON[kubeletReport](t, u); len(ur.Claims) != 1 || ur.Claims[0].Error != "" {
		t.Fatalf("unprepare result %+v", ur)
	}
	if specs, _ := filepath.Glob(filepath.Join(a.cdiDir, "*.json")); len(specs) != 0 {
		t.Errorf("CDI specs left after unprepare: %v", specs)
	}

	t.Run("claim the agent cannot find, next to one it can", func(t *testing.T) {
		r := dranodectl(t, "kubelet", "prepare", "--registry-dir", a.registryDir, "--driver", "gpu.example.com",
			"--claim", "default/nope/0000", "--claim", claim, "-o", "json")
		wantCode(t, r, 1, "default/nope", "driver failed a claim")
		rep := mustJSON[kubeletReport](t, r)
		if len(rep.Claims) != 2 || rep.Claims[0].Error == "" || rep.Claims[1].Error != "" || len(rep.Claims[1].Devices) != 1 {
			t.Errorf("want the unknown claim failed and the other prepared: %+v", rep)
		}
		if strings.Contains(r.stderr, "gpu-claim") {
			t.Errorf("the prepared claim is named as failed: %s", r.stderr)
		}
		wantCode(t, dranodectl(t, "kubelet", "unprepare", "--registry-dir", a.registryDir, "--driver", "gpu.example.com", "--claim", claim), 0)
	})
	t.Run("driver not registered", func(t *testing.T) {
		r := dranodectl(t, "kubelet", "prepare", "--registry-dir", a.registryDir, "--driver", "nic.example.com", "--claim", claim)
		// The message names the socket it asked and who answered.
		wantCode(t, r, 1, "driver not registered", "gpu.example.com-reg.sock", `DRAPlugin plugin "gpu.example.com"`)
	})
}

func TestKubeletCommandLine(t *testing.T) {
	empty := t.TempDir()
	// A registration socket left behind by a driver that died: the file is
	// there, nobody listens.
	stale, err := os.MkdirTemp("", "dctl-stale-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stale) })
	l, err := net.Listen("unix", filepath.Join(stale, "d-reg.sock"))
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"no driver", []string{"kubelet", "prepare", "--claim", "a/b/c"}, 2, []string{"--driver is required"}},
		{"no claim", []string{"kubelet", "unprepare", "--driver", "d"}, 2, []string{"--claim"}},
		{"malformed claim", []string{"kubelet", "prepare", "--driver", "d", "--claim", "a/b"}, 2, []string{"NAMESPACE/NAME/UID"}},
		{"empty registry", []string{"kubelet", "prepare", "--registry-dir", empty, "--driver", "d", "--claim", "a/b/c"}, 1, []string{"driver not registered", "no sockets"}},
		{"stale socket", []string{"kubelet", "prepare", "--registry-dir", stale, "--driver", "d", "--claim", "a/b/c", "--timeout", "20s"}, 1, []string{"driver not registered", "d-reg.sock"}},
		{"missing registry", []string{"kubelet", "prepare", "--registry-dir", filepath.Join(empty, "x"), "--driver", "d", "--claim", "a/b/c"}, 1, []string{"registry directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, dranodectl(t, tt.args...), tt.code, tt.want...)
		})
	}
}
