package pluginmgr_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/pluginmgr/internal/testbin"
)

// hostModeEnv makes the test binary act as a plugin host that launches the
// test plugin, prints its PID and waits to be killed.
const hostModeEnv = "PLUGINMGR_TEST_HOST_MODE"

func runAsHost() {
	p, err := pluginmgr.Launch(context.Background(), pluginmgr.PluginConfig{
		Name: "test", Path: os.Getenv("PLUGINMGR_TEST_DRIVER"), SHA256: testbin.SHA256(os.Getenv("PLUGINMGR_TEST_DRIVER")),
	}, pluginmgr.Options{})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	if _, err := p.Prepare(context.Background(), nil); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	for _, pid := range childPIDs(os.Getpid()) {
		fmt.Println(pid)
	}
	fmt.Println("ready")
	select {}
}

// TestPluginDiesWithKilledHost: a host killed with SIGKILL cannot close its
// plugins; the kernel must end them, or the next agent would run beside them.
func TestPluginDiesWithKilledHost(t *testing.T) {
	host := exec.Command(os.Args[0], "-test.run=^$")
	host.Env = append(os.Environ(), hostModeEnv+"=1", "PLUGINMGR_TEST_DRIVER="+testDriverPath)
	host.Stderr = os.Stderr
	out, err := host.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	var plugins []int
	lines := bufio.NewScanner(out)
	for lines.Scan() && lines.Text() != "ready" {
		pid, err := strconv.Atoi(lines.Text())
		if err != nil {
			host.Process.Kill()
			t.Fatalf("host: %s", lines.Text())
		}
		plugins = append(plugins, pid)
	}
	if len(plugins) != 1 {
		host.Process.Kill()
		t.Fatalf("host reported plugin PIDs %v, want one", plugins)
	}
	if err := host.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	host.Wait()
	// A liveness bound, not a speed assertion: the kernel signals at once.
	for deadline := time.Now().Add(30 * time.Second); processExists(plugins[0]); {
		if time.Now().After(deadline) {
			syscall.Kill(plugins[0], syscall.SIGKILL)
			t.Fatalf("plugin %d still running 30 s after its host was killed", plugins[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processExists reports whether pid is a live (not zombie) process.
func processExists(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	state := stateOf(stat)
	return state != "Z" && state != "X"
}
