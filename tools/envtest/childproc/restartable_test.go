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

// TestRestartableEnvironment: the child inherits the test's environment
// without its DRANODE_ variables, and gets those of Env.
func TestRestartableEnvironment(t *testing.T) {
	t.Setenv("DRANODE_CONTROLPLANE_BIN", "/somewhere")
	t.Setenv("RESTARTABLE_TEST_INHERITED", "kept")
	p := &childproc.Restartable{Path: "/bin/sh", Args: []string{"-c", `env; echo end`}, LogPath: filepath.Join(t.TempDir(), "log"),
		Env: []string{"DRANODE_HTTP_PPROF=true"}}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	env := p.LogTail(1000)
	if !strings.Contains(env, "\nend") {
		t.Fatalf("output %q: the child did not finish", env)
	}
	for _, want := range []string{"RESTARTABLE_TEST_INHERITED=kept", "DRANODE_HTTP_PPROF=true"} {
		if !strings.Contains(env, want) {
			t.Errorf("child's environment lacks %s:\n%s", want, env)
		}
	}
	if strings.Contains(env, "DRANODE_CONTROLPLANE_BIN") {
		t.Errorf("child inherited DRANODE_CONTROLPLANE_BIN:\n%s", env)
	}
}
