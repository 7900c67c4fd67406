package childproc_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/dranode/dranode/tools/envtest/childproc"
)

func TestRestartableStartsStopsAndStartsAgain(t *testing.T) {
	up := make(chan struct{}, 2)
	p := &childproc.Restartable{Path: "/bin/sh", Args: []string{"-c", `echo up; exec sleep 300`}, LogPath: filepath.Join(t.TempDir(), "log"),
		Output: signalWriter(up)}
	for round := range 2 {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		<-up // running
		if p.PID() == 0 {
			t.Fatalf("round %d: no PID while running", round)
		}
		exited := p.Exited()
		p.Stop() // TERM ends the sleep the shell became
		select {
		case <-exited:
		default:
			t.Fatalf("round %d: Stop returned before the process ended", round)
		}
		if p.PID() != 0 {
			t.Fatalf("round %d: a PID after Stop", round)
		}
	}
	if got := strings.Count(p.LogTail(10), "up"); got != 2 {
		t.Fatalf("log %q: want the output of both starts", p.LogTail(10))
	}
}

// signalWriter sends on c for every write: the child said something.
type signalWriter chan struct{}

func (w signalWriter) Write(b []byte) (int, error) {
	w <- struct{}{}
	return len(b), nil
}
