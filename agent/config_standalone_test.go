package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The agent as `make run` starts it (examples/config/standalone.yaml, no
// kubelet) logs no error, says once why the sweep for leftover claims
// cleans nothing, and `config validate` says the same of the kubelet's
// checkpoint.
func TestStandaloneAgentFirstContact(t *testing.T) {
	plugin, bin := binaries(t)
	data, err := os.ReadFile("../examples/config/standalone.yaml")
	if err != nil {
		t.Fatal(err)
	}
	code, err := os.ReadFile(plugin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(code)
	run := t.TempDir()
	abs, err := filepath.Abs("../examples/config/claims")
	if err != nil {
		t.Fatal(err)
	}
	// The loop example would attach this machine's loop devices as root;
	// its own first contact is examples/loop's to test, under the host's
	// test lock, which a library module's tests cannot take.
	loop := strings.Index(string(data), "    # Loop block devices")
	if loop < 0 || !strings.Contains(string(data[loop:]), "@LOOP_SHA256@") {
		t.Fatal("examples/config/standalone.yaml: its loop driver, the last, is not where this test cuts: update the test")
	}
	data = data[:loop]
	cfg := strings.NewReplacer("@RUN@", run, "@BIN@", filepath.Dir(plugin), "@CLAIMS@", abs,
		"@GPU_SHA256@", hex.EncodeToString(sum[:]),
		// 8085 may be a running agent's on a shared machine.
		"127.0.0.1:8085", "127.0.0.1:0").Replace(string(data))
	// The kubelet's checkpoint at its default path would be this machine's.
	cfg += "kubelet.draManagerState: " + filepath.Join(run, "no-kubelet", "dra_manager_state") + "\n"
	file := filepath.Join(run, "agent.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}

	out, err := exec.Command(bin, "config", "validate", "--config", file).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "found: kubelet.draManagerState:") || !strings.Contains(string(out), "as expected standalone") {
		t.Errorf("config validate: %v\n%s", err, out)
	}

	p := startAgentProcess(t, bin, file, filepath.Join(run, "plugins_registry", "gpu.example.com-reg.sock"))
	const skipped = "Sweep for leftover claims skipped"
	for !strings.Contains(p.logs.String(), skipped) {
		select {
		case <-p.done:
			t.Fatalf("agent exited: %v\n%s", p.err, p.logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	// klog's error lines start "E" and the date (E1126 09:41:07.123456).
	if errs := regexp.MustCompile(`(?m)^E\d{4} .*$`).FindAllString(p.logs.String(), -1); len(errs) > 0 {
		t.Errorf("the standalone agent logged errors:\n%s", strings.Join(errs, "\n"))
	}
	if lines := regexp.MustCompile(`(?m)^I\d{4} .*`+skipped+`.*standalone.*$`).FindAllString(p.logs.String(), -1); len(lines) != 1 {
		t.Errorf("sweep skipped: %d info lines saying standalone, want 1:\n%s", len(lines), p.logs.String())
	}
}
