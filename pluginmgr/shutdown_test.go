package pluginmgr_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dranode/dranode/pluginmgr"
)

// openFDs counts this process's open file descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// children lists the PIDs (zombies included) whose parent is this process.
func children(t testing.TB) []int {
	t.Helper()
	return childPIDs(os.Getpid())
}

// childPIDs lists the PIDs (zombies included) whose parent is parent.
func childPIDs(parent int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		panic(err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		if fields := statFields(stat); len(fields) > 1 {
			if ppid, _ := strconv.Atoi(fields[1]); ppid == parent {
				out = append(out, pid)
			}
		}
	}
	return out
}

// statFields splits /proc/PID/stat after "pid (comm)": comm may contain
// spaces, so split after the last ')'. Field 0 is the state, 1 the parent.
func statFields(stat []byte) []string {
	return strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
}

func stateOf(stat []byte) string {
	if f := statFields(stat); len(f) > 0 {
		return f[0]
	}
	return ""
}

func TestCleanShutdown(t *testing.T) {
	// Warm up what stays open for the life of the test binary (the
	// runtime's own descriptors) before counting.
	warm := launch(t, testConfig(t, nil), quietOptions())
	if err := warm.Close(); err != nil {
		t.Fatal(err)
	}
	fdsBefore := openFDs(t)
	if c := children(t); len(c) != 0 {
		t.Fatalf("children before the test: %v", c)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the host's socket directory goes here

	m := pluginmgr.NewManager(quietOptions())
	if err := m.Start(context.Background(), twoConfigs(t)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"test", "second"} {
		p, ok := m.Plugin(name)
		if !ok {
			t.Fatalf("plugin %q not running", name)
		}
		if _, err := p.Prepare(context.Background(), []pluginmgr.Claim{claimFor("a", "dev0")}); err != nil {
			t.Fatal(err)
		}
	}
	if c := children(t); len(c) != 2 {
		t.Errorf("children while running: %v, want 2", c)
	}
	sockets, _ := filepath.Glob(filepath.Join(tmp, "dranode-plugin-*", "*"))
	if len(sockets) == 0 {
		t.Errorf("no plugin socket under %s while running; the socket check below would prove nothing", tmp)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	if c := children(t); len(c) != 0 {
		t.Errorf("children (or zombies) after Close: %v", c)
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("left behind in the temp dir: %v", left)
	}
	if after := openFDs(t); after != fdsBefore {
		t.Errorf("open file descriptors: %d before, %d after Close", fdsBefore, after)
	}
	if st := m.Statuses(); len(st) != 0 {
		t.Errorf("statuses after Close = %+v", st)
	}
}
