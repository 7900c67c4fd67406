package pluginmgr_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/pluginmgr/internal/testdriver"
)

// BenchmarkStartup measures launch to first inventory: checksum, process
// start, go-plugin handshake with AutoMTLS, Configure, Info and the first
// WatchDevices message, then a clean Close (not timed).
func BenchmarkStartup(b *testing.B) {
	cfg := testConfig(b, nil)
	b.ReportAllocs()
	for b.Loop() {
		p, err := pluginmgr.Launch(context.Background(), cfg, quietOptions())
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := p.WaitInventory(context.Background(), 0); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := p.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkPrepare compares a one-claim Prepare through the host, go-plugin
// and the plugin process with the same driver called in-process; the
// difference is the protocol's overhead.
//
// "plugin" makes the calls back to back, with both processes' threads
// still awake from the last one; "plugin-after-idle" waits idleBeforeCall
// before each (untimed), as the agent's calls come when the kubelet
// prepares one pod after another, so that each call wakes two idle
// processes. "echo-after-idle" is the floor of that: four bytes sent to a
// child process over a Unix socket and echoed back, after the same wait.
func BenchmarkPrepare(b *testing.B) {
	claims := []pluginmgr.Claim{claimFor("bench", "dev0")}
	ctx := context.Background()
	b.Run("plugin", func(b *testing.B) {
		p := launch(b, testConfig(b, nil), quietOptions())
		b.ReportAllocs()
		for b.Loop() {
			res, err := p.Prepare(ctx, claims)
			if err != nil || res[0].Err != nil {
				b.Fatal(err, res)
			}
		}
	})
	b.Run("plugin-after-idle", func(b *testing.B) {
		p := launch(b, testConfig(b, nil), quietOptions())
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			time.Sleep(idleBeforeCall)
			b.StartTimer()
			res, err := p.Prepare(ctx, claims)
			if err != nil || res[0].Err != nil {
				b.Fatal(err, res)
			}
		}
	})
	b.Run("echo-after-idle", func(b *testing.B) {
		conn := startEcho(b)
		buf := make([]byte, 4)
		for b.Loop() {
			b.StopTimer()
			time.Sleep(idleBeforeCall)
			b.StartTimer()
			if _, err := conn.Write([]byte("ping")); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(conn, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		d := &testdriver.Driver{}
		if err := d.Configure(ctx, "node-1", nil); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			res, err := d.Prepare(ctx, claims)
			if err != nil || res[0].Err != nil {
				b.Fatal(err, res)
			}
		}
	})
}

// idleBeforeCall is longer than the Go runtime keeps an idle process's
// threads spinning, shorter than the agent's gap between two pods'
// prepares on a loaded node (compat/drabench: 5 to 12 ms).
const idleBeforeCall = 5 * time.Millisecond

// echoModeEnv makes the test binary echo what it reads from the Unix
// socket the variable names, for echo-after-idle's child process.
const echoModeEnv = "PLUGINMGR_TEST_ECHO_SOCKET"

// runEcho is the child process of echo-after-idle.
func runEcho(socket string) {
	conn, err := net.Dial("unix", socket)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_, _ = io.Copy(conn, conn)
	os.Exit(0)
}

// startEcho starts the test binary as an echo process and returns the
// connection to it.
func startEcho(b *testing.B) net.Conn {
	socket := filepath.Join(b.TempDir(), "echo.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), echoModeEnv+"="+socket)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	conn, err := l.Accept()
	if err != nil {
		_ = cmd.Process.Kill()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		conn.Close() // the child's copy ends, and so does the child
		if err := cmd.Wait(); err != nil {
			b.Errorf("echo process: %v", err)
		}
	})
	return conn
}
