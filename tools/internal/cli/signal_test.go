package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dranode/dranode/claimcache"
)

// endlessLog writes a journal log whose check cannot finish in any time a
// test could wait: after a valid header, 20 MiB of 0x01 bytes. Every offset
// reads as a frame of 0x01010101 bytes (16 MiB) that fits in the file and
// fails its checksum, so telling a torn tail from corruption checksums 16 MiB
// at each of 3 million offsets (about 50 TB) — as claimcache would.
func endlessLog(t *testing.T) string {
	t.Helper()
	data := []byte("DRNJLOG1")
	data = append(data, mustFrame(fmt.Appendf(nil, `{"kind":%q,"version":1,"generation":1}`, claimcache.Kind))...)
	data = append(data, bytes.Repeat([]byte{1}, 20<<20)...)
	path := filepath.Join(t.TempDir(), "log.1")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// SIGINT and SIGTERM stop a long inspect of the real binary, which exits
// with 130 or 143 having stopped mid-way (it says where), not by the
// StopGrace backstop.
func TestSignalStopsALongInspect(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("watches the process's open files in /proc")
	}
	bin := buildBinary(t, "../..", "./cmd/dranodectl", filepath.Join(t.TempDir(), "dranodectl"))
	path := endlessLog(t)
	for _, tt := range []struct {
		sig  syscall.Signal
		code int
		name string
	}{
		{syscall.SIGINT, 130, "SIGINT"},
		{syscall.SIGTERM, 143, "SIGTERM"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, "checkpoint", "inspect", path)
			var stderr syncBuffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			t.Cleanup(func() { cmd.Process.Kill(); <-done })
			// The file is opened only after the signal handlers are
			// installed: once it is open, the signal is the command's.
			waitUntilOpen(t, cmd.Process.Pid, path, done)
			// Once the damaged frame is read, the command is looking for
			// a valid frame after it, where it stays: the signal lands
			// there (sent as soon as the file was open, it could stop the
			// command before it read the damaged frame).
			waitUntilRead(t, cmd.Process.Pid, damagedFrameEnd, done)
			if err := cmd.Process.Signal(tt.sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				t.Fatalf("still running 2 minutes after %s; stderr: %s", tt.name, stderr.String())
			}
			if got := cmd.ProcessState.ExitCode(); got != tt.code {
				t.Errorf("exit status %d, want %d; stderr: %s", got, tt.code, stderr.String())
			}
			msg := stderr.String()
			for _, want := range []string{"stopped by " + tt.name, "stopped looking for a valid frame after the damage at byte"} {
				if !strings.Contains(msg, want) {
					t.Errorf("stderr does not say %q:\n%s", want, msg)
				}
			}
			if strings.Contains(msg, "did not stop within") {
				t.Errorf("the command ignored the signal and was cut off by the backstop:\n%s", msg)
			}
		})
	}
}

// damagedFrameEnd is where endlessLog's first damaged frame ends: its
// header announces 0x01010101 bytes.
const damagedFrameEnd = 8 + 8 + 0x01010101

// waitUntilRead returns once process pid has read at least n bytes through
// read system calls (rchar in /proc/<pid>/io), reads of any file included.
func waitUntilRead(t *testing.T, pid int, n int64, exited <-chan struct{}) {
	t.Helper()
	ioPath := filepath.Join("/proc", fmt.Sprint(pid), "io")
	for {
		data, err := os.ReadFile(ioPath)
		if err != nil {
			t.Fatalf("reading %s: %v", ioPath, err)
		}
		for line := range strings.Lines(string(data)) {
			var read int64
			if _, err := fmt.Sscanf(line, "rchar: %d", &read); err == nil && read >= n {
				return
			}
		}
		select {
		case <-exited:
			t.Fatal("dranodectl exited before it read the damaged frame")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitUntilOpen returns once process pid has path open.
func waitUntilOpen(t *testing.T, pid int, path string, exited <-chan struct{}) {
	t.Helper()
	fds := filepath.Join("/proc", fmt.Sprint(pid), "fd")
	for {
		entries, _ := os.ReadDir(fds)
		for _, en := range entries {
			if target, err := os.Readlink(filepath.Join(fds, en.Name())); err == nil && target == path {
				return
			}
		}
		select {
		case <-exited:
			t.Fatal("dranodectl exited before it opened the file")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A context cancelled by a signal makes Run exit with the signal's status
// and say so, whatever the command was doing.
func TestRunExitStatusOnSignal(t *testing.T) {
	path := endlessLog(t)
	for _, tt := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(&Interrupted{Signal: tt.sig})
		var out, errb bytes.Buffer
		if code := Run(ctx, []string{"checkpoint", "verify", path}, &out, &errb); code != tt.code {
			t.Errorf("%v: exit status %d, want %d; stderr: %s", tt.sig, code, tt.code, errb.String())
		}
		if !strings.Contains(errb.String(), "stopped by") {
			t.Errorf("%v: stderr %q does not say why it stopped", tt.sig, errb.String())
		}
	}
}
