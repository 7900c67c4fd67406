package powerloss

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/dranode/dranode/cdi"
)

// The cdi workload: a run starts, as an agent does after a reboot, with
// SpecDir.Sweep removing every spec it finds (all are from earlier runs).
// Then each goroutine writes Steps claims' specs: version 1, then version 2
// over it (a replace), and removes every second claim's spec.
//
// "cdi-nofsync" and "cdi-nodirsync" run the same workload with a copy of
// SpecDir.Write and SpecDir.Remove that skips the file's fsync, or the
// directory's: writers that are wrong on purpose, to prove that the checks
// catch what such a bug loses.
func init() {
	for name, mode := range map[string]specWriteMode{"cdi": realSpecDir, "cdi-nofsync": skipFileSync, "cdi-nodirsync": skipDirSync} {
		workloads[name] = workload{
			write: func(dir string, env WriterEnv, out *Acker) error { return writeSpecs(dir, env, out, mode) },
			newChecker: func() checker {
				c := &specChecker{}
				c.adopt(map[string]int{})
				return c
			},
		}
	}
}

const (
	specVendor = "powerloss.dranode.io"
	specClass  = "claim"
)

type specWriteMode int

const (
	realSpecDir specWriteMode = iota
	skipFileSync
	skipDirSync
)

// specFor is version v of uid's spec; the padding makes the versions
// differ in size too.
func specFor(uid string, v int) *cdi.Spec {
	s := &cdi.Spec{
		Kind: specVendor + "/" + specClass,
		Devices: []cdi.Device{{
			Name: uid + "-gpu",
			ContainerEdits: cdi.ContainerEdits{Env: []string{
				"POWERLOSS_VERSION=" + strconv.Itoa(v),
				"PAD=" + strings.Repeat("x", 100+len(uid)*v*37%900),
			}},
		}},
	}
	s.Version = cdi.MinimumVersion(s)
	return s
}

func specBytes(uid string, v int) []byte {
	b, err := specFor(uid, v).Encode()
	if err != nil {
		panic(err) // a fixed, valid spec
	}
	return b
}

func specUID(name string) (string, bool) {
	prefix := cdi.TransientSpecFileName(specVendor, specClass, "")
	uid, ok := strings.CutPrefix(name, strings.TrimSuffix(prefix, ".json"))
	if !ok {
		return "", false
	}
	uid, ok = strings.CutSuffix(uid, ".json")
	return uid, ok && uid != ""
}

func writeSpecs(dir string, env WriterEnv, out *Acker, mode specWriteMode) error {
	sd := cdi.SpecDir{Path: dir}
	out.Try("*", "Sweep", "")
	removed, err := sd.Sweep(specVendor, specClass, func(string) bool { return false })
	if err != nil {
		// Documented: files that are not specs are left alone and named
		// in the error; the rest was removed. The checks judge them.
		fmt.Fprintln(os.Stderr, "sweep:", err)
	}
	var uids []string
	for _, p := range removed {
		if uid, ok := specUID(filepath.Base(p)); ok {
			uids = append(uids, uid)
		}
	}
	payload, _ := json.Marshal(uids)
	out.Ack("*", "Sweep", string(payload))

	write, remove := sd.Write, sd.Remove
	if mode != realSpecDir {
		write = func(spec *cdi.Spec, uid string) (string, error) { return brokenWrite(dir, spec, uid, mode) }
		remove = func(vendor, class, uid string) error { return brokenRemove(dir, uid, mode) }
	}
	var wg sync.WaitGroup
	errs := make([]error, env.Goroutines)
	for g := range env.Goroutines {
		wg.Go(func() {
			for k := range env.Steps {
				uid := fmt.Sprintf("r%dg%dc%d", env.Run, g, k)
				for v := 1; v <= 2; v++ {
					out.Try(uid, "Write", strconv.Itoa(v))
					if _, err := write(specFor(uid, v), uid); err != nil {
						errs[g] = fmt.Errorf("write %s version %d: %w", uid, v, err)
						return
					}
					out.Ack(uid, "Write", strconv.Itoa(v))
				}
				if k%2 == 1 {
					out.Try(uid, "Remove", "")
					if err := remove(specVendor, specClass, uid); err != nil {
						errs[g] = fmt.Errorf("remove %s: %w", uid, err)
						return
					}
					out.Ack(uid, "Remove", "")
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// brokenWrite is SpecDir.Write's sequence (temporary file, fsync, rename,
// fsync of the directory) with one of the fsyncs left out.
func brokenWrite(dir string, spec *cdi.Spec, uid string, mode specWriteMode) (string, error) {
	data, err := spec.Encode()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := cdi.TransientSpecFileName(specVendor, specClass, uid)
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return "", err
	}
	defer tmp.Close()
	if _, err := tmp.Write(data); err != nil {
		return "", err
	}
	if mode != skipFileSync {
		if err := tmp.Sync(); err != nil {
			return "", err
		}
	}
	path := filepath.Join(dir, name)
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	if mode != skipDirSync {
		return path, syncDir(dir)
	}
	return path, nil
}

func brokenRemove(dir, uid string, mode specWriteMode) error {
	if err := os.Remove(filepath.Join(dir, cdi.TransientSpecFileName(specVendor, specClass, uid))); err != nil {
		return err
	}
	if mode != skipDirSync {
		return syncDir(dir)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// specOp is an attempted change: a write of version V (V > 0), a removal
// (V == 0), or the sweep (key "*").
type specOp struct{ v int }

// specChecker holds, per claim UID, the spec version as of its last
// acknowledged change (0: no spec) and the change attempted after it.
type specChecker struct {
	model map[string]int
	tried map[string]specOp
	seen  map[string]bool // acknowledged this run
	acks  int
}

func (c *specChecker) setup(dir string) error { return os.Mkdir(dir, 0o755) }

func (c *specChecker) observe(line string) error {
	kind, uid, op, payload, err := parseLine(line)
	if err != nil {
		return err
	}
	v := 0
	if op == "Write" {
		if v, err = strconv.Atoi(payload); err != nil || v < 1 {
			return fmt.Errorf("malformed cdi line %q", line)
		}
	}
	if kind == "try" {
		c.tried[uid] = specOp{v: v}
		return nil
	}
	delete(c.tried, uid)
	c.acks++
	c.seen[uid] = true
	if op == "Sweep" {
		var removed []string
		if err := json.Unmarshal([]byte(payload), &removed); err != nil {
			return fmt.Errorf("malformed cdi line %q: %w", line, err)
		}
		for _, u := range removed {
			delete(c.model, u)
			c.seen[u] = true
		}
		return nil
	}
	if v == 0 {
		delete(c.model, uid)
	} else {
		c.model[uid] = v
	}
	return nil
}

// load reads the spec directory as a runtime would: every *.json file
// must be a whole spec. It returns the version of each claim's spec (-1
// for a file that is no version of it) and counts temporary files.
func (c *specChecker) load(dir string) (found map[string]int, vs []Violation, debris int, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]int{}, nil, 0, nil
	}
	if err != nil {
		return nil, nil, 0, err
	}
	found = map[string]int{}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-") {
			debris++ // never loaded by a runtime; nothing removes it
			continue
		}
		uid, ok := specUID(name)
		if !ok {
			vs = append(vs, Violation{Kind: Invented, Key: name, Detail: "a file no writer creates"})
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, nil, 0, err
		}
		found[uid] = -1
		for v := 1; v <= 2; v++ {
			if string(data) == string(specBytes(uid, v)) {
				found[uid] = v
			}
		}
	}
	return found, vs, debris, nil
}

func (c *specChecker) reset(dir string) error {
	found, vs, _, err := c.load(dir)
	if err == nil && len(vs) > 0 {
		err = vs[0]
	}
	if err != nil {
		return err
	}
	c.adopt(found)
	return nil
}

// check: every claim's spec is the version of its last acknowledged change
// or of the change attempted after it, and every spec file is whole.
func (c *specChecker) check(dir string) ([]Violation, int, int) {
	acks := c.acks
	found, vs, debris, err := c.load(dir)
	if err != nil {
		return []Violation{{Kind: ReopenFailed, Detail: err.Error()}}, acks, debris
	}
	_, sweeping := c.tried["*"]
	uids := map[string]bool{}
	for _, m := range []map[string]int{c.model, found} {
		for u := range m {
			uids[u] = true
		}
	}
	for u := range c.tried {
		if u != "*" {
			uids[u] = true
		}
	}
	for _, uid := range sortedKeys(uids) {
		acked := c.model[uid]
		allowed := map[int]bool{acked: true}
		op, tried := c.tried[uid]
		if tried {
			allowed[op.v] = true
		}
		if sweeping {
			allowed[0] = true
		}
		got := found[uid]
		if allowed[got] {
			continue
		}
		name := cdi.TransientSpecFileName(specVendor, specClass, uid)
		switch {
		case got == -1:
			detail := "holds no version that was written"
			if _, err := cdi.DecodeSpec(mustRead(filepath.Join(dir, name))); err != nil {
				detail += "; a runtime cannot load it: " + err.Error()
			}
			kind := Corrupt
			if acked > 0 {
				kind = Lost // the acknowledged version is gone
			}
			vs = append(vs, Violation{Kind: kind, Key: name, Detail: fmt.Sprintf("%s (version %d acknowledged)", detail, acked)})
		default:
			// A change to a claim that was acknowledged, or that the run
			// started from, was undone; anything else was never written.
			kind := Invented
			if _, known := c.model[uid]; known || c.seen[uid] {
				kind = Lost
			}
			vs = append(vs, Violation{Kind: kind, Key: name, Detail: fmt.Sprintf("found %s, %s acknowledged%s", describeSpec(got), describeSpec(acked), describeTried(op, tried))})
		}
	}
	c.adopt(found)
	return vs, acks, debris
}

func (c *specChecker) adopt(found map[string]int) {
	c.model, c.tried, c.seen, c.acks = found, map[string]specOp{}, map[string]bool{}, 0
}

func describeSpec(v int) string {
	if v == 0 {
		return "no spec"
	}
	return "version " + strconv.Itoa(v)
}

func describeTried(op specOp, tried bool) string {
	if !tried {
		return ""
	}
	if op.v == 0 {
		return " (a removal was attempted)"
	}
	return fmt.Sprintf(" (version %d was attempted)", op.v)
}

func mustRead(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}
