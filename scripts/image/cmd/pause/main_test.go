package main

import (
	"bufio"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the pause program for TestSignals.
	if os.Getenv("PAUSE_TEST_RUN_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestSignals: pause waits, and SIGTERM or SIGINT end it with status 0.
func TestSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "PAUSE_TEST_RUN_MAIN=1")
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(stderr)
			if !sc.Scan() || !strings.Contains(sc.Text(), "waiting") {
				t.Fatalf("first line %q, %v", sc.Text(), sc.Err())
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			for sc.Scan() {
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("pause after %v: %v, want status 0", sig, err)
			}
		})
	}
}

// TestReap: a child that exited is a zombie until reap collects it.
func TestReap(t *testing.T) {
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	// ForkExec, not os/exec: nothing else may wait for the child.
	pid, err := syscall.ForkExec(truePath, []string{"true"}, &syscall.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	for state(t, pid) != "Z" {
		time.Sleep(10 * time.Millisecond)
	}
	if got := reap(); !slices.Contains(got, pid) {
		t.Fatalf("reap() = %v, want %d among them", got, pid)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); !os.IsNotExist(err) {
		t.Errorf("/proc/%d still there after reap: %v", pid, err)
	}
}

// state is the process state letter from /proc/PID/stat.
func state(t *testing.T, pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return fields[0]
}
