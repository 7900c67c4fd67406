package checkpoint

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dranode/dranode/checkpoint/crashtest"
)

// The crash tests run this test binary again as a child (the role is chosen
// by an environment variable, as the standard library's exec tests do). The
// child writes in a loop and prints each acknowledged state on stdout only
// after the call returned; the parent SIGKILLs it at random moments and
// then checks what is on disk against what was acknowledged. The child is
// this package's test binary built without the race detector (package
// crashtest says why).
const crashRoleEnv = "CHECKPOINT_CRASH_CHILD"

var crashChild crashtest.Child

func TestMain(m *testing.M) {
	os.Exit(crashChild.Run(m))
}

type crashDoc struct {
	N   int    `json:"n"`
	Pad string `json:"pad"` // size varies with N so that saves take different times
}

func crashPad(n int) string { return strings.Repeat(strconv.Itoa(n%10), 100+(n*397)%20000) }

type crashValue struct {
	Key string `json:"key"`
	Pad string `json:"pad"`
}

var crashSchema = Schema{Kind: "dranode.io/crash-test", Version: 1}

func TestCrashChild(t *testing.T) {
	role := os.Getenv(crashRoleEnv)
	if role == "" {
		t.Skip("helper process for the crash tests")
	}
	path := os.Getenv("CHECKPOINT_CRASH_PATH")
	var err error
	switch role {
	case "file":
		err = crashFileChild(path)
	case "hold":
		// Take both locks, say so, and wait to be killed.
		f, ferr := OpenFile[crashDoc](path+"-file", crashSchema)
		j, jerr := OpenJournal[crashValue](path+"-journal", crashSchema)
		if err = errors.Join(ferr, jerr); err == nil {
			fmt.Println("ack locked")
			select {} // until the parent kills us
		}
		_, _ = f, j
	case "journal":
		run, _ := strconv.Atoi(os.Getenv("CHECKPOINT_CRASH_RUN"))
		err = crashJournalChild(path, run)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	fmt.Fprintln(os.Stderr, "child failed:", err)
	os.Exit(3)
}

func crashFileChild(path string) error {
	f, err := OpenFile[crashDoc](path, crashSchema)
	if err != nil {
		return err
	}
	doc, err := f.Load()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for n := doc.N + 1; ; n++ {
		if err := f.Save(crashDoc{N: n, Pad: crashPad(n)}); err != nil {
			return err
		}
		fmt.Printf("ack %d\n", n)
	}
}

func crashJournalChild(dir string, run int) error {
	// A tiny compaction threshold, so that kills land inside log
	// rotations and snapshot writes too.
	j, err := OpenJournal[crashValue](dir, crashSchema, WithCompaction(4<<10, 1))
	if err != nil {
		return err
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format, args...)
	}
	// Drop what earlier runs left, so the state stays small and the log
	// outgrows it often: compactions then happen in most runs.
	var drops []Change[crashValue]
	for key := range j.Snapshot() {
		say("drop %s\n", key)
		drops = append(drops, Change[crashValue]{Key: key, Delete: true})
	}
	if err := j.Commit(drops...); err != nil {
		return err
	}
	errc := make(chan error)
	for g := range 4 {
		go func() {
			for n := 0; ; n++ {
				key := crashKey(run, g, n)
				changes := []Change[crashValue]{{Key: key, Value: crashValue{Key: key, Pad: strings.Repeat("x", (n*131)%700)}}}
				if n >= 3 {
					changes = append(changes, Change[crashValue]{Key: crashKey(run, g, n-3), Delete: true})
				}
				say("try %s\n", key)
				if err := j.Commit(changes...); err != nil {
					errc <- err
					return
				}
				say("ack %s\n", key)
			}
		}()
	}
	return <-errc
}

func crashKey(run, g, n int) string { return fmt.Sprintf("r%d-g%d-%d", run, g, n) }

// runAndKill starts a child, waits for a random number of acknowledgements
// and a random short delay, kills it with SIGKILL and returns every line
// it printed.
func runAndKill(t *testing.T, rng *rand.Rand, maxAcks int, env ...string) []string {
	t.Helper()
	cmd := exec.Command(crashChild.Path(t), "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acksBeforeKill := 1 + rng.IntN(maxAcks)
	delay := time.Duration(rng.IntN(1500)) * time.Microsecond
	var lines []string
	sc := bufio.NewScanner(out)
	killed := false
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if !killed && strings.HasPrefix(sc.Text(), "ack ") {
			acksBeforeKill--
			if acksBeforeKill == 0 {
				time.Sleep(delay)
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				killed = true
			}
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("child exited before it was killed: %v\nstderr:\n%s", err, stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v\nstderr:\n%s", err, stderr.String())
	}
	return lines
}

func crashKills(t *testing.T) int {
	if testing.Short() {
		return 30
	}
	return 200
}

var crashSeed = flag.Uint64("checkpoint.crashseed", 0, "seed of the crash tests' kill moments (0: a new one; a failure logs the one to replay)")

// crashRand returns the kill moments' source, logging its seed so that a
// failing run can be replayed with -checkpoint.crashseed.
func crashRand(t *testing.T) *rand.Rand {
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay: go test -run '^%s$' -checkpoint.crashseed=%d)", seed, t.Name(), seed)
	return rand.New(rand.NewPCG(seed, 0))
}

// The crash tests wait on fsync and on their children most of the time:
// run side by side, the two overlap their waits.

func TestCrashFileSIGKILL(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state")
	rng := crashRand(t)
	acked := 0
	for kill := range crashKills(t) {
		lines := runAndKill(t, rng, 5, crashRoleEnv+"=file", "CHECKPOINT_CRASH_PATH="+path)
		for _, l := range lines {
			n, err := strconv.Atoi(strings.TrimPrefix(l, "ack "))
			if err != nil {
				t.Fatalf("kill %d: unexpected child output %q", kill, l)
			}
			acked = n
		}
		f, err := OpenFile[crashDoc](path, crashSchema)
		if err != nil {
			t.Fatalf("kill %d: %v", kill, err)
		}
		doc, err := f.Load()
		f.Close()
		if err != nil {
			t.Fatalf("kill %d: after last acknowledged state %d: %v", kill, acked, err)
		}
		if doc.N != acked && doc.N != acked+1 {
			t.Fatalf("kill %d: loaded state %d, want the acknowledged %d or the next one", kill, doc.N, acked)
		}
		if doc.Pad != crashPad(doc.N) {
			t.Fatalf("kill %d: state %d has the padding of another state", kill, doc.N)
		}
		acked = doc.N
	}
	if acked < crashKills(t) {
		t.Fatalf("only %d saves acknowledged over %d kills", acked, crashKills(t))
	}
}

func TestCrashJournalSIGKILL(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "journal")
	rng := crashRand(t)
	tried := map[string]bool{}
	acked := map[string]bool{}
	dropped := map[string]bool{}     // deletes attempted when a child started
	generations := map[uint64]bool{} // snapshot generations seen: each is a compaction
	for run := range crashKills(t) {
		lines := runAndKill(t, rng, 12, crashRoleEnv+"=journal", "CHECKPOINT_CRASH_PATH="+dir, "CHECKPOINT_CRASH_RUN="+strconv.Itoa(run))
		for _, l := range lines {
			verb, key, ok := strings.Cut(l, " ")
			switch {
			case ok && verb == "try":
				tried[key] = true
			case ok && verb == "ack":
				acked[key] = true
			case ok && verb == "drop":
				dropped[key] = true
			default:
				t.Fatalf("run %d: unexpected child output %q", run, l)
			}
		}
		if data, err := os.ReadFile(filepath.Join(dir, snapshotName)); err == nil {
			if h, _, err := readHeader(snapshotName, data, magicSnapshot, crashSchema); err == nil {
				generations[h.Generation] = true
			}
		}
		j, err := OpenJournal[crashValue](dir, crashSchema)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		state := j.Snapshot()
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		for key, v := range state {
			if !tried[key] {
				t.Fatalf("run %d: journal holds %q, which was never written", run, key)
			}
			if v.Key != key {
				t.Fatalf("run %d: %q holds the value of %q", run, key, v.Key)
			}
		}
		for key := range acked {
			if _, ok := state[key]; ok {
				continue
			}
			// Absent is right only if the commit that deletes it (the
			// one three steps later) was at least attempted.
			var r, g, n int
			if _, err := fmt.Sscanf(key, "r%d-g%d-%d", &r, &g, &n); err != nil {
				t.Fatal(err)
			}
			if !tried[crashKey(r, g, n+3)] && !dropped[key] {
				t.Fatalf("run %d: acknowledged %q is missing", run, key)
			}
		}
		for key := range state {
			// Commits are atomic: the commit that wrote r-g-n deleted
			// r-g-(n-3).
			var r, g, n int
			fmt.Sscanf(key, "r%d-g%d-%d", &r, &g, &n)
			if _, ok := state[crashKey(r, g, n-3)]; n >= 3 && ok {
				t.Fatalf("run %d: %q is present, but the same commit deleted %q", run, key, crashKey(r, g, n-3))
			}
		}
	}
	if len(generations) < 2 {
		t.Fatalf("only %d compactions seen; the test does not cover them", len(generations))
	}
	t.Logf("%d kills, %d commits acknowledged, %d snapshot generations seen", crashKills(t), len(acked), len(generations))
}

// TestLockAcrossProcesses: while another process holds a store, opening it
// fails with ErrLocked; once that process dies (even by SIGKILL, without
// closing anything) the lock is free again.
func TestLockAcrossProcesses(t *testing.T) {
	base := filepath.Join(t.TempDir(), "held")
	cmd := exec.Command(crashChild.Path(t), "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashRoleEnv+"=hold", "CHECKPOINT_CRASH_PATH="+base)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ack locked" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child did not take the locks: %q", sc.Text())
	}
	if _, err := OpenFile[crashDoc](base+"-file", crashSchema); !errors.Is(err, ErrLocked) {
		t.Errorf("OpenFile while another process holds it: %v, want ErrLocked", err)
	}
	if _, err := OpenJournal[crashValue](base+"-journal", crashSchema); !errors.Is(err, ErrLocked) {
		t.Errorf("OpenJournal while another process holds it: %v, want ErrLocked", err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	f, err := OpenFile[crashDoc](base+"-file", crashSchema)
	if err != nil {
		t.Fatalf("OpenFile after the holder died: %v", err)
	}
	f.Close()
	j, err := OpenJournal[crashValue](base+"-journal", crashSchema)
	if err != nil {
		t.Fatalf("OpenJournal after the holder died: %v", err)
	}
	j.Close()
}
