package powerloss

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dranode/dranode/compat/powerloss/lazyfs"
)

// CutMode says where a run's power cut lands.
type CutMode int

const (
	// CutRandom draws, for every iteration, one of: the Nth mutating
	// operation (N uniform up to the length of the last uncut run), the
	// moment the writer has acknowledged K changes (K uniform up to
	// MaxAcks), or the end of the run.
	CutRandom CutMode = iota
	// CutAfterAcks cuts once the writer has acknowledged K changes, K
	// uniform in [1, MaxAcks].
	CutAfterAcks
	// CutSweep runs the workload once without a cut to record its
	// mutating operations, then, from the same starting state every time,
	// cuts before each of them in turn: every crash point of the run.
	// Operations are found again by Label and rank among those with the
	// same label (the 2nd snapshot rename), not by index, which background
	// work shifts. Iterations is ignored. Use it with one goroutine, so
	// that the writer's own operations come in the same order.
	CutSweep
)

// Config is one power-loss campaign against one workload.
type Config struct {
	// Workload names the product and writer: "journal", "claimcache", "cdi", or a deliberately broken writer ("cdi-nofsync", "cdi-nodirsync").
	Workload string
	// Iterations is the number of power cuts (CutRandom, CutAfterAcks).
	Iterations int
	// Goroutines commit concurrently in the writer; Steps is how many
	// changes each one makes per run (each workload says what a step is).
	Goroutines, Steps int
	// Seed makes the cut points reproducible (as far as the writer's
	// scheduling allows).
	Seed uint64
	// Precreate creates the store, empty and durable, before the first
	// run; otherwise the writer's first run creates it.
	Precreate bool
	// Fresh starts every iteration from the initial state instead of from
	// what the previous cut left, so that one cut's damage cannot hide the
	// next one's.
	Fresh bool
	Cut   CutMode
	// MinAcks and MaxAcks bound K for CutAfterAcks and CutRandom
	// (default 1 and 20).
	MinAcks, MaxAcks int
	// FS are the lazyfs options of every run (FailAt and Seed are set by
	// the harness). TornRandom sets Torn on a random half of the runs.
	FS         lazyfs.Options
	TornRandom bool
	// Writer is the program to run as the writer: the test binary, which
	// must call WriterMain from TestMain. Default os.Args[0].
	Writer string
	// Log, if set, receives a line per iteration.
	Log func(format string, args ...any)
}

// ViolationKind classifies what a check found.
type ViolationKind string

// The violations a check can find.
const (
	// Lost: an acknowledged change is not in the reopened state.
	Lost ViolationKind = "lost"
	// Invented: the state holds something no change ever wrote.
	Invented ViolationKind = "invented"
	// Corrupt: a stored item is damaged where the product promises it is
	// whole (a partial batch, a torn spec file).
	Corrupt ViolationKind = "corrupt"
	// ReopenFailed: the product's own open failed, or panicked.
	ReopenFailed ViolationKind = "reopen failed"
	// WriterFailed: the writer exited with an error without a cut.
	WriterFailed ViolationKind = "writer failed"
)

// Violation is one broken promise, found after the cut of one iteration.
type Violation struct {
	Iteration int
	Kind      ViolationKind
	// Key names the item (journal key, claim UID, spec file).
	Key    string
	Detail string
	// Cut is where the power was cut.
	Cut string
}

func (v Violation) Error() string {
	s := fmt.Sprintf("iteration %d: %s", v.Iteration, v.Kind)
	if v.Key != "" {
		s += " " + v.Key
	}
	return s + ": " + v.Detail + " (cut: " + v.Cut + ")"
}

// Result is what a campaign did and found.
type Result struct {
	Iterations int
	// Acks is the number of acknowledged changes the checks covered.
	Acks int
	// CutPoints counts the cuts by where they landed (see Label).
	CutPoints map[string]int
	// Debris is the number of leftover temporary files the last check
	// found (files a crash left that nothing has removed since).
	Debris     int
	Violations []Violation
}

// LostAcks reports whether acknowledged changes were lost: missing from
// the reopened state, or unreadable because the reopen failed.
func (r *Result) LostAcks() bool {
	for _, v := range r.Violations {
		if v.losesAcks() {
			return true
		}
	}
	return false
}

func (v Violation) losesAcks() bool { return v.Kind == Lost || v.Kind == ReopenFailed }

// LostAcksAt returns the iterations (from 1) whose checks found lost
// acknowledged changes.
func (r *Result) LostAcksAt() map[int]bool {
	at := map[int]bool{}
	for _, v := range r.Violations {
		if v.losesAcks() {
			at[v.Iteration] = true
		}
	}
	return at
}

// workload is one product under test: the writer side runs in the writer
// process on the mount, the checker side in the harness.
type workload struct {
	write      func(dir string, env WriterEnv, out *Acker) error
	newChecker func() checker
}

// checker holds what the writer acknowledged and attempted, and judges the
// state after a cut.
type checker interface {
	// setup creates the store, empty, in dir (not on a lazyfs).
	setup(dir string) error
	// observe takes one line the writer printed.
	observe(line string) error
	// check reopens the store in dir with the product's own code, reports
	// what breaks a promise, and adopts what it found as the state the
	// next run starts from.
	check(dir string) (v []Violation, acks, debris int)
	// reset adopts the state in dir without judging it.
	reset(dir string) error
}

// workloads lists the workloads by name (each file registers its own).
var workloads = map[string]workload{}

// Run runs a campaign: for every iteration, it mounts a lazyfs over the
// store, starts the writer, cuts the power, and checks the rebuilt store.
// The error is about the harness itself (a mount that failed); what the
// checks found is in Result.Violations.
func Run(cfg Config) (*Result, error) {
	w, ok := workloads[cfg.Workload]
	if !ok {
		return nil, fmt.Errorf("powerloss: unknown workload %q", cfg.Workload)
	}
	if cfg.Goroutines < 1 || cfg.Steps < 1 {
		return nil, fmt.Errorf("powerloss: Goroutines (%d) and Steps (%d) must be at least 1", cfg.Goroutines, cfg.Steps)
	}
	if cfg.Cut != CutSweep && cfg.Iterations < 1 {
		return nil, fmt.Errorf("powerloss: Iterations is %d; want at least 1", cfg.Iterations)
	}
	cfg.MinAcks = max(cfg.MinAcks, 1)
	if cfg.MaxAcks < 1 {
		cfg.MaxAcks = 20
	}
	if cfg.MaxAcks < cfg.MinAcks {
		return nil, fmt.Errorf("powerloss: MaxAcks (%d) is below MinAcks (%d)", cfg.MaxAcks, cfg.MinAcks)
	}
	if cfg.Writer == "" {
		cfg.Writer = os.Args[0]
	}
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	work, err := os.MkdirTemp("", "powerloss-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	h := &harness{cfg: cfg, w: w, chk: w.newChecker(), work: work,
		backing: filepath.Join(work, "disk"), mnt: filepath.Join(work, "mnt"), base: filepath.Join(work, "base"),
		res: &Result{CutPoints: map[string]int{}}}
	for _, d := range []string{h.backing, h.mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	if cfg.Precreate {
		if err := h.chk.setup(filepath.Join(h.backing, storeDir)); err != nil {
			return nil, fmt.Errorf("powerloss: setup: %w", err)
		}
	}
	if cfg.Cut == CutSweep || cfg.Fresh {
		if err := h.save(); err != nil {
			return nil, err
		}
	}
	if cfg.Cut == CutSweep {
		err = h.sweep()
	} else {
		err = h.random()
	}
	return h.res, err
}

// save keeps the backing directory as the state to restore.
func (h *harness) save() error {
	h.baseRun = h.run
	if err := os.RemoveAll(h.base); err != nil {
		return err
	}
	return copyTree(h.backing, h.base)
}

// restore puts the saved state back, for the checker too.
func (h *harness) restore() error {
	if err := os.RemoveAll(h.backing); err != nil {
		return err
	}
	if err := copyTree(h.base, h.backing); err != nil {
		return err
	}
	if err := h.chk.reset(filepath.Join(h.backing, storeDir)); err != nil {
		return fmt.Errorf("powerloss: reset the checker: %w", err)
	}
	h.run = h.baseRun // the same run (boot, names) every time
	return nil
}

// storeDir is where the store lives, under the mount's root, so that
// creating it is a change to a directory the writer must sync.
const storeDir = "store"

type harness struct {
	cfg     Config
	w       workload
	chk     checker
	work    string
	backing string
	mnt     string
	res     *Result
	run     int
	base    string // a saved state (sweep, Fresh)
	baseRun int
}

// trigger is where one iteration cuts.
type trigger struct {
	failAt int // lazyfs FailAt
	acks   int // freeze after this many acks
	// Stop at the nth operation whose Label is label.
	label string
	nth   int
}

func (t trigger) String() string {
	switch {
	case t.failAt > 0:
		return fmt.Sprintf("at operation %d", t.failAt)
	case t.acks > 0:
		return fmt.Sprintf("after %d acks", t.acks)
	case t.label != "":
		return fmt.Sprintf("at occurrence %d of %q", t.nth, t.label)
	}
	return "at the end"
}

// stopAt is the lazyfs StopAt of a label trigger.
func (t trigger) stopAt() func(*lazyfs.Op, lazyfs.Op) bool {
	if t.label == "" {
		return nil
	}
	seen := 0
	return func(last *lazyfs.Op, op lazyfs.Op) bool {
		if Label(&lazyfs.Cut{Last: last, Stopped: &op}) == t.label {
			seen++
		}
		return seen == t.nth
	}
}

func (h *harness) random() error {
	rng := rand.New(rand.NewPCG(h.cfg.Seed, 0x706f7765726c6f73))
	lastOps := 0
	for i := 0; i < h.cfg.Iterations; i++ {
		if h.cfg.Fresh && i > 0 {
			if err := h.restore(); err != nil {
				return err
			}
		}
		var tr trigger
		switch {
		case h.cfg.Cut == CutAfterAcks:
			tr.acks = h.cfg.MinAcks + rng.IntN(h.cfg.MaxAcks-h.cfg.MinAcks+1)
		case i == 0 || lastOps == 0:
			// Run to the end first, to learn how long a run is.
		default:
			switch rng.IntN(5) {
			case 0, 1, 2:
				tr.failAt = 1 + rng.IntN(lastOps)
			case 3:
				tr.acks = h.cfg.MinAcks + rng.IntN(h.cfg.MaxAcks-h.cfg.MinAcks+1)
			}
		}
		torn := h.cfg.FS.Torn || (h.cfg.TornRandom && rng.IntN(2) == 0)
		out, err := h.iteration(tr, torn, rng.Uint64())
		if err != nil {
			return err
		}
		if out.cut.Stopped == nil {
			lastOps = out.cut.Ops
		}
	}
	return nil
}

func (h *harness) sweep() error {
	// The starting state: what one uncut run leaves (so that compaction
	// and recovery have something to work on), copied for every cut.
	if _, err := h.iteration(trigger{}, false, h.cfg.Seed); err != nil {
		return err
	}
	if err := h.save(); err != nil {
		return err
	}
	count, err := h.iteration(trigger{}, false, h.cfg.Seed)
	if err != nil {
		return err
	}
	// Every operation of the counting run, named by its label and the
	// how-manieth operation with that label it was: a background
	// goroutine (the journal's compaction) shifts operation indexes
	// between runs, but the third snapshot rename stays the third.
	seen := map[string]int{}
	for i := range count.trace {
		cut := &lazyfs.Cut{Stopped: &count.trace[i]}
		if i > 0 {
			cut.Last = &count.trace[i-1]
		}
		label := Label(cut)
		seen[label]++
		if err := h.restore(); err != nil {
			return err
		}
		if _, err := h.iteration(trigger{label: label, nth: seen[label]}, h.cfg.FS.Torn, h.cfg.Seed+uint64(i)); err != nil {
			return err
		}
	}
	return nil
}

// outcome is what an iteration did.
type outcome struct {
	cut   *lazyfs.Cut
	trace []lazyfs.Op
	label string
}

// iteration is one run of the writer and one power cut.
func (h *harness) iteration(tr trigger, torn bool, seed uint64) (*outcome, error) {
	h.run++
	it := h.res.Iterations + 1
	opts := h.cfg.FS
	opts.FailAt, opts.StopAt, opts.Torn, opts.Seed, opts.Trace = tr.failAt, tr.stopAt(), torn, seed, true
	fsys, err := lazyfs.Mount(h.backing, h.mnt, opts)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(h.cfg.Writer)
	cmd.Env = append(os.Environ(), WriterEnv{
		Workload: h.cfg.Workload, Dir: filepath.Join(h.mnt, storeDir), Run: h.run,
		Goroutines: h.cfg.Goroutines, Steps: h.cfg.Steps, Seed: seed,
	}.environ()...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fsys.Unmount()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		fsys.Unmount()
		return nil, fmt.Errorf("powerloss: start writer: %w", err)
	}

	// Lines are judged as they come; the freeze for an ack-count trigger
	// happens while the writer goes on, so the cut lands wherever it is.
	var (
		mu      sync.Mutex
		acks    int
		lineErr error
	)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			if err := h.chk.observe(line); err != nil && lineErr == nil {
				lineErr = err
			}
			if strings.HasPrefix(line, "ack\t") {
				acks++
				if tr.acks > 0 && acks == tr.acks {
					fsys.Freeze()
				}
			}
			mu.Unlock()
		}
		io.Copy(io.Discard, stdout)
	}()
	exited := make(chan error, 1)
	go func() {
		<-read // Wait closes the pipe: read it all first
		exited <- cmd.Wait()
	}()

	var waitErr error
	finished := false
	select {
	case <-fsys.Frozen():
	case waitErr = <-exited:
		finished = true
	case <-time.After(5 * time.Minute):
		cmd.Process.Kill()
		fsys.CutPower(nil)
		return nil, fmt.Errorf("powerloss: iteration %d: the writer made no progress for 5 minutes (stderr: %s)", it, tail(stderr.String()))
	}
	cut, err := fsys.CutPower(func() error {
		if finished {
			return nil
		}
		// The writer may have finished just as the freeze came.
		if err := cmd.Process.Signal(syscall.SIGKILL); !errors.Is(err, os.ErrProcessDone) {
			return err
		}
		return nil
	})
	if !finished {
		waitErr = <-exited
	}
	if err != nil {
		return nil, fmt.Errorf("powerloss: iteration %d: %w", it, err)
	}
	h.res.Iterations = it
	where := describe(tr, cut)
	label := Label(cut)
	if finished {
		label = "end of run"
	}
	h.res.CutPoints[label]++

	var vs []Violation
	if lineErr != nil {
		vs = append(vs, Violation{Kind: WriterFailed, Detail: "its output disagrees with the checker: " + lineErr.Error()})
	}
	killed := false
	var exitErr *exec.ExitError
	if errors.As(waitErr, &exitErr) {
		if st, ok := exitErr.Sys().(syscall.WaitStatus); ok && st.Signaled() && st.Signal() == syscall.SIGKILL {
			killed = true
		}
	}
	if waitErr != nil && !killed {
		vs = append(vs, Violation{Kind: WriterFailed, Detail: fmt.Sprintf("%v: %s", waitErr, tail(stderr.String()))})
	}
	found, acked, debris := h.chk.check(filepath.Join(h.backing, storeDir))
	vs = append(vs, found...)
	h.res.Acks += acked
	h.res.Debris = debris
	for i := range vs {
		vs[i].Iteration, vs[i].Cut = it, where
	}
	h.res.Violations = append(h.res.Violations, vs...)
	h.cfg.Log("iteration %d: cut %s; %d acks checked, %d violations", it, where, acked, len(vs))
	return &outcome{cut: cut, trace: fsys.Trace(), label: label}, nil
}

func describe(tr trigger, cut *lazyfs.Cut) string {
	s := tr.String()
	if cut.Last != nil {
		s += ", after " + cut.Last.String()
	}
	if cut.Stopped != nil {
		s += ", before " + cut.Stopped.String()
	}
	return s
}

var digits = regexp.MustCompile(`[0-9]+`)

// Label names where a cut landed, for coverage counts: the kind and file
// pattern (digits as N) of the operation it stopped, "between rename and
// directory fsync" when it stopped the fsync of the directory a rename just
// changed, or "between operations" when no operation was waiting. (Result
// counts a cut after the writer finished as "end of run".)
func Label(cut *lazyfs.Cut) string {
	if cut.Stopped == nil {
		return "between operations"
	}
	s, l := cut.Stopped, cut.Last
	if s.Kind == lazyfs.OpFsyncDir && l != nil && l.Kind == lazyfs.OpRename && pathDir(l.To) == s.Path {
		return "between rename and directory fsync"
	}
	name := s.Path
	if s.Kind != lazyfs.OpFsyncDir {
		name = pathBase(name)
	}
	label := string(s.Kind) + " " + digits.ReplaceAllString(name, "N")
	if s.Kind == lazyfs.OpRename {
		label += " -> " + digits.ReplaceAllString(pathBase(s.To), "N")
	}
	return label
}

func pathDir(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return "."
}

func pathBase(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

// Labels returns the cut points of r sorted, with their counts.
func (r *Result) Labels() []string {
	var out []string
	for l, n := range r.CutPoints {
		out = append(out, fmt.Sprintf("%s: %d", l, n))
	}
	sort.Strings(out)
	return out
}

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func copyTree(src, dst string) error {
	return filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, info.Mode().Perm())
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, info.Mode().Perm())
	})
}

// WriterEnv is what the harness tells a writer process, through its
// environment.
type WriterEnv struct {
	Workload   string
	Dir        string // the store, on the mount
	Run        int    // counts runs from 1; a run is a boot
	Goroutines int
	Steps      int
	Seed       uint64
}

const envPrefix = "POWERLOSS_WRITER_"

func (e WriterEnv) environ() []string {
	return []string{
		envPrefix + "WORKLOAD=" + e.Workload,
		envPrefix + "DIR=" + e.Dir,
		envPrefix + "RUN=" + strconv.Itoa(e.Run),
		envPrefix + "GOROUTINES=" + strconv.Itoa(e.Goroutines),
		envPrefix + "STEPS=" + strconv.Itoa(e.Steps),
		envPrefix + "SEED=" + strconv.FormatUint(e.Seed, 10),
	}
}

// IsWriter reports whether this process was started by Run as a writer.
func IsWriter() bool { return os.Getenv(envPrefix+"WORKLOAD") != "" }

// WriterMain runs the writer this process was started as and returns its
// exit code: call os.Exit(WriterMain()) from TestMain when IsWriter.
func WriterMain() int {
	var e WriterEnv
	var errs []error
	atoi := func(name string) int {
		n, err := strconv.Atoi(os.Getenv(envPrefix + name))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s%s: %w", envPrefix, name, err))
		}
		return n
	}
	e.Workload, e.Dir = os.Getenv(envPrefix+"WORKLOAD"), os.Getenv(envPrefix+"DIR")
	e.Run, e.Goroutines, e.Steps = atoi("RUN"), atoi("GOROUTINES"), atoi("STEPS")
	seed, err := strconv.ParseUint(os.Getenv(envPrefix+"SEED"), 10, 64)
	errs = append(errs, err)
	e.Seed = seed
	w, ok := workloads[e.Workload]
	if !ok {
		errs = append(errs, fmt.Errorf("unknown workload %q", e.Workload))
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "powerloss writer:", err)
		return 2
	}
	out := &Acker{w: bufio.NewWriter(os.Stdout)}
	if err := w.write(e.Dir, e, out); err != nil {
		fmt.Fprintln(os.Stderr, "powerloss writer:", err)
		return 1
	}
	return 0
}

// Acker prints a writer's lines. Lines go to stdout, which is not on the
// mount, and are flushed at once: an "ack" line is printed only after the
// call it acknowledges returned, so every ack the harness reads was
// durable, if the product keeps its promise, before the cut.
type Acker struct {
	mu sync.Mutex
	w  *bufio.Writer
}

// Try announces a change about to be attempted: it may or may not be in
// the state after a cut.
func (a *Acker) Try(key, op, payload string) { a.line("try", key, op, payload) }

// Ack reports a change whose call returned successfully; payload is what
// the call returned, if anything.
func (a *Acker) Ack(key, op, payload string) { a.line("ack", key, op, payload) }

func (a *Acker) line(kind, key, op, payload string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fmt.Fprintf(a.w, "%s\t%s\t%s\t%s\n", kind, key, op, payload)
	a.w.Flush()
}

// parseLine splits a writer's line.
func parseLine(line string) (kind, key, op, payload string, err error) {
	parts := strings.SplitN(line, "\t", 4)
	if len(parts) != 4 || (parts[0] != "try" && parts[0] != "ack") {
		return "", "", "", "", fmt.Errorf("malformed writer line %q", line)
	}
	return parts[0], parts[1], parts[2], parts[3], nil
}

// reopen runs the product's open under recover, so that a panic is
// reported as a violation rather than ending the campaign.
func reopen(what string, open func() error) (v *Violation) {
	defer func() {
		if r := recover(); r != nil {
			v = &Violation{Kind: ReopenFailed, Detail: fmt.Sprintf("%s panicked: %v", what, r)}
		}
	}()
	if err := open(); err != nil {
		return &Violation{Kind: ReopenFailed, Detail: fmt.Sprintf("%s: %v", what, err)}
	}
	return nil
}
