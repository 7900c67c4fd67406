package harness

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProcessLogsAndKill(t *testing.T) {
	dir := t.TempDir()
	p := &Process{Path: "/bin/sh", Args: []string{"-c", "echo started; exec sleep 60"}, LogPath: filepath.Join(dir, "log")}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err == nil {
		t.Error("a second Start of a running process succeeded")
	}
	err := Poll(t.Context(), 10*time.Millisecond, 10*time.Second, "output", func(context.Context) (bool, error) {
		return strings.Contains(p.LogTail(5), "started"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.PID() == 0 {
		t.Error("no PID for a running process")
	}
	exited := p.Exited()
	p.Kill()
	select {
	case <-exited:
	default:
		t.Fatal("Kill returned before the process ended")
	}
	if p.PID() != 0 {
		t.Errorf("PID %d after Kill", p.PID())
	}
	if p.ExitError() == nil {
		t.Error("a killed process reports a clean exit")
	}
	// Restartable after a kill, as a crashed driver is.
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	p.Stop()
}
