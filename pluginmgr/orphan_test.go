package pluginmgr_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/pluginmgr/internal/testbin"
	"golang.org/x/sys/unix"
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
	// The killed host cannot remove its plugin's socket directory either;
	// it goes in a directory of the test's, not the machine's /tmp.
	tmp := t.TempDir()
	host := exec.Command(os.Args[0], "-test.run=^$")
	host.Env = append(os.Environ(), hostModeEnv+"=1", "PLUGINMGR_TEST_DRIVER="+testDriverPath, "TMPDIR="+tmp)
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
	// Opened before the kill, so that the PID cannot be reused in between.
	pidfd, err := unix.PidfdOpen(plugins[0], 0)
	if err != nil {
		host.Process.Kill()
		t.Fatalf("pidfd of plugin %d: %v", plugins[0], err)
	}
	defer unix.Close(pidfd)
	if err := host.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	host.Wait()
	// A liveness bound, not a speed assertion: the kernel signals at once,
	// and the pidfd becomes readable when the plugin has exited.
	exited := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	ready, err := unix.Poll(exited, 30_000)
	for err == unix.EINTR {
		ready, err = unix.Poll(exited, 30_000)
	}
	if err != nil {
		t.Fatalf("waiting for plugin %d to exit: %v", plugins[0], err)
	}
	if ready == 0 {
		unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		t.Fatalf("plugin %d still running 30 s after its host was killed", plugins[0])
	}
	if dirs, _ := filepath.Glob(filepath.Join(tmp, "dranode-plugin-*")); len(dirs) != 1 {
		t.Errorf("socket directories in the host's TMPDIR: %v, want the one the killed host left", dirs)
	}
}
