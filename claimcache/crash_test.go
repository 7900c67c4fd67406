package claimcache

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The crash test kills a real process in the middle of its work: the child
// (this test binary, re-executed) runs claim lifecycles from several
// goroutines and prints each step once the Cache acknowledged it; the parent
// SIGKILLs it and checks that every acknowledged step survived and that the
// only thing in doubt is the one step each goroutine had in flight.

const (
	crashChildEnv = "CLAIMCACHE_CRASH_CHILD_DIR"
	crashWorkers  = 8
)

// Steps of a claim's life, as the child acknowledges them.
var crashSteps = []State{1: PrepareStarted, 2: Prepared, 3: UnprepareStarted, 4: ""} // "": removed

func crashRef(worker, claim int) ClaimRef {
	return ClaimRef{Namespace: "ns", Name: fmt.Sprintf("w%d-c%d", worker, claim), UID: fmt.Sprintf("uid-w%d-c%d", worker, claim)}
}

// TestCrashChild is the child's body; it does nothing in a normal run.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("only runs as the child of TestCrashKillsProcess")
	}
	c, _, err := Open(dir, bootOne)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	var out sync.Mutex
	ack := func(w, k, step int) {
		out.Lock()
		fmt.Printf("ack %d %d %d\n", w, k, step)
		out.Unlock()
	}
	var wg sync.WaitGroup
	for w := range crashWorkers {
		wg.Go(func() {
			for k := 0; ; k++ {
				ref := crashRef(w, k)
				devs := map[string][]Device{"d.example.com": {{Pool: "p", Device: ref.UID, CDIDeviceIDs: []string{"example.com/d=" + ref.UID}}}}
				steps := []func() error{
					func() error { _, err := c.StartPrepare(ref, "pod"); return err },
					func() error { _, err := c.FinishPrepare(ref.UID, devs); return err },
					func() error { _, err := c.StartUnprepare(ref.UID); return err },
					func() error { return c.Remove(ref.UID) },
				}
				for i, step := range steps {
					if err := step(); err != nil {
						fmt.Println("error:", err)
						os.Exit(3)
					}
					ack(w, k, i+1)
				}
			}
		})
	}
	wg.Wait()
}

func TestCrashKillsProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for round, kills := range []int{5, 60, 400} {
		t.Run(fmt.Sprint("after ", kills, " acks"), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
			cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// last[w] is the last acknowledged (claim, step) of worker w.
			type pos struct{ claim, step int }
			last := make([]pos, crashWorkers)
			sc := bufio.NewScanner(stdout)
			acks := 0
			read := func() bool {
				if !sc.Scan() {
					return false
				}
				f := strings.Fields(sc.Text())
				if len(f) != 4 || f[0] != "ack" {
					t.Logf("child: %s", sc.Text())
					return true
				}
				w, _ := strconv.Atoi(f[1])
				k, _ := strconv.Atoi(f[2])
				s, _ := strconv.Atoi(f[3])
				last[w] = pos{k, s}
				acks++
				return true
			}
			for acks < kills && read() {
			}
			if acks < kills {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("child stopped after %d acks: %v", acks, sc.Err())
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			// Acks the child wrote before it died are still in the pipe; each
			// is one write, so none is torn.
			for read() {
			}
			cmd.Wait() // killed: the error is expected

			c, rep := openT(t, dir, bootOne)
			interrupted := map[string]bool{}
			for _, e := range rep.Interrupted {
				interrupted[e.Claim.UID] = true
			}
			for w, p := range last {
				// Claims before the current one are gone for good.
				for k := range p.claim {
					if _, err := c.Get(crashRef(w, k).UID); err == nil {
						t.Errorf("round %d worker %d: claim %d was removed (acknowledged) but restored", round, w, k)
					}
				}
				// The current claim is at its last acknowledged step or the one after.
				cur, next := p, pos{p.claim, p.step + 1}
				if p.step == 4 {
					next = pos{p.claim + 1, 1}
				}
				got := func(q pos) bool {
					e, err := c.Get(crashRef(w, q.claim).UID)
					want := crashSteps[q.step]
					if want == "" || q.step == 0 {
						return err != nil
					}
					return err == nil && e.State == want
				}
				atCur := got(cur) && (cur.claim == next.claim || got(pos{next.claim, 0}))
				atNext := got(next) && (cur.claim == next.claim || got(pos{cur.claim, 4}))
				if !atCur && !atNext {
					e1, err1 := c.Get(crashRef(w, cur.claim).UID)
					e2, err2 := c.Get(crashRef(w, next.claim).UID)
					t.Errorf("worker %d: last ack claim %d step %d; restored %+v (%v) and %+v (%v)", w, p.claim, p.step, e1, err1, e2, err2)
				}
				for k := p.claim + 2; k < p.claim+4; k++ {
					if _, err := c.Get(crashRef(w, k).UID); err == nil {
						t.Errorf("worker %d: claim %d restored, never started", w, k)
					}
				}
			}
			prepared := map[string]bool{}
			for _, e := range c.List() {
				in := e.State == PrepareStarted || e.State == UnprepareStarted
				if in != interrupted[e.Claim.UID] {
					t.Errorf("%s in state %s: reported interrupted=%v", e.Claim.UID, e.State, interrupted[e.Claim.UID])
				}
				if e.State == Prepared {
					prepared[e.Claim.UID] = true
				}
			}

			// Then the node reboots: every Prepared claim is reported as no
			// longer prepared, with the devices to unprepare it.
			before := c.List()
			c.Close()
			c, rep = openT(t, dir, bootTwo)
			defer c.Close()
			if len(before) > 0 && !rep.RebootDetected {
				t.Error("reboot not detected")
			}
			for _, e := range rep.NoLongerPrepared {
				if !prepared[e.Claim.UID] || len(e.Drivers["d.example.com"]) != 1 || e.PreparedInCurrentBoot() {
					t.Errorf("after reboot: %+v", e)
				}
				delete(prepared, e.Claim.UID)
			}
			if len(prepared) != 0 {
				t.Errorf("prepared claims not reported after the reboot: %v", prepared)
			}
		})
	}
}
