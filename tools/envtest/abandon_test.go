package envtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const abandonEnv = "ENVTEST_ABANDON_HELPER"

// TestMain turns the test binary into TestAbandonedControlPlaneDies' child
// when abandonEnv is set.
func TestMain(m *testing.M) {
	if os.Getenv(abandonEnv) != "" {
		abandon()
	}
	os.Exit(m.Run())
}

// abandon starts a control plane, reports it and exits without Stop — as a
// test binary killed by -timeout or a panic does.
func abandon() {
	env := &Environment{}
	if _, err := env.Start(); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	report, _ := json.Marshal(struct {
		Dir  string
		PIDs map[string]int
	}{env.Dir(), env.PIDs()})
	fmt.Printf("REPORT %s\n", report)
	os.Exit(0)
}

// stateOf returns a process's state letter from /proc, or "" when it is
// gone. A zombie ("Z") has ended too.
func stateOf(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// pid (comm) state ...; comm may hold spaces, the last ')' ends it.
	rest := data[bytes.LastIndexByte(data, ')')+1:]
	fields := strings.Fields(string(rest))
	if len(fields) == 0 {
		return ""
	}
	return fields[0]
}

// When the program that started the control plane ends without Stop, the
// control plane ends with it.
func TestAbandonedControlPlaneDies(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), abandonEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var report struct {
		Dir  string
		PIDs map[string]int
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "REPORT "); ok {
			if err := json.Unmarshal([]byte(line), &report); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(report.PIDs) != 2 {
		t.Fatalf("helper reported %+v, output:\n%s", report, out)
	}
	t.Cleanup(func() { os.RemoveAll(report.Dir) }) // nobody else will
	// The kernel delivers the signal as the helper exits; the test's
	// -timeout bounds the wait should it never come.
	for name, pid := range report.PIDs {
		for {
			s := stateOf(pid)
			if s == "" || s == "Z" {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("%s (pid %d) ended with its parent", name, pid)
	}
}
