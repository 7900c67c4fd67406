package envtest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// These tests run scripts/build-controlplane.sh and scripts/build-node.sh
// (and so scripts/lib/build.sh) against a cache directory of their own, with
// a fake "go" that writes stand-in binaries and a fake "dpkg-query" that
// names stand-in Debian files: what the scripts do with a cold cache, a
// complete one, a stale one, one that lacks a binary, two runs at once and a
// failing build, without spending minutes building. The real builds run in
// every "make test".

// buildScript describes one build script and the cache entry it makes.
type buildScript struct {
	name     string
	path     string   // relative to this package
	env      string   // the variable naming a prebuilt directory
	built    []string // the binaries it builds with go build, in that order
	files    []string // every executable a complete entry holds
	manifest []string // the repository files hashed into MANIFEST
	flags    string   // the build flags MANIFEST records after them
}

var buildScripts = []buildScript{
	{
		name:     "controlplane",
		path:     "../../scripts/build-controlplane.sh",
		env:      BinaryDirEnv,
		built:    []string{EtcdBinary, APIServerBinary, SchedulerBinary, ControllerManagerBinary},
		files:    []string{EtcdBinary, APIServerBinary, SchedulerBinary, ControllerManagerBinary},
		manifest: []string{"build/controlplane/go.mod", "build/controlplane/go.sum"},
		flags:    "CGO_ENABLED=0 go build -trimpath",
	},
	{
		name:     "node",
		path:     "../../scripts/build-node.sh",
		env:      "DRANODE_NODE_BIN",
		built:    []string{"containerd", "containerd-shim-runc-v2", "ctr", "kubelet"},
		files:    []string{"kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "runc", "cni/bridge", "cni/loopback", "cni/host-local"},
		manifest: []string{"build/node/go.mod", "build/node/go.sum", "build/node/kubelet/go.mod", "build/node/kubelet/go.sum"},
		flags:    "CGO_ENABLED=0 go build -trimpath",
	},
}

// forEachScript runs test for each build script, with a cache directory
// of its own and the fake tools first in PATH.
func forEachScript(t *testing.T, test func(t *testing.T, s buildScript, f *fakeTools)) {
	for _, s := range buildScripts {
		t.Run(s.name, func(t *testing.T) {
			t.Setenv("XDG_CACHE_HOME", t.TempDir())
			for _, other := range buildScripts {
				t.Setenv(other.env, "")
			}
			test(t, s, newFakeTools(t))
		})
	}
}

// manifestOf is what the script records of the modules it builds from.
func (s buildScript) manifestOf(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, f := range s.manifest {
		data, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(sum[:]), f)
	}
	fmt.Fprintf(&b, "%s\n", s.flags)
	return b.String()
}

func (s buildScript) printDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(s.path, "--print-dir").Output()
	if err != nil {
		t.Fatalf("%s --print-dir: %v", s.path, err)
	}
	return strings.TrimSpace(string(out))
}

// run runs the script and returns its stdout, failing the test when it
// fails.
func (s buildScript) run(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(s.path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", s.path, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// fakeTools is a directory first in PATH with a "go" that, for "go build
// -o FILE", writes a stand-in executable to FILE (different bytes each
// time) and records FILE, and runs the real go for anything else; and a
// "dpkg-query" that lists stand-ins for Debian's runc and CNI plugins.
type fakeTools struct {
	dir   string
	calls string // one line per go build: the -o file
	// gate, when set in the environment as FAKE_GO_GATE, holds every build
	// until the file exists; each waiting build first creates gate+".waiting".
	gate string
}

func newFakeTools(t *testing.T) *fakeTools {
	t.Helper()
	real, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeTools{dir: t.TempDir()}
	f.calls = filepath.Join(f.dir, "builds.log")
	f.gate = filepath.Join(f.dir, "gate")
	debian := filepath.Join(f.dir, "debian")
	for _, p := range []string{"sbin/runc", "cni/bridge", "cni/loopback", "cni/host-local"} {
		if err := os.MkdirAll(filepath.Join(debian, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeExecutable(t, filepath.Join(debian, p), 0o755)
	}
	goScript := fmt.Sprintf(`#!/bin/bash
[[ "$1" == -C ]] && shift 2
[[ "$1" == build ]] || exec %q "$@"
[[ -n "${FAKE_GO_FAIL:-}" ]] && { echo 'fake go: build refused' >&2; exit 3; }
while (($#)); do [[ "$1" == -o ]] && out=$2; shift; done
if [[ -n "${FAKE_GO_GATE:-}" ]]; then
	touch "$FAKE_GO_GATE.waiting"
	while [[ ! -e "$FAKE_GO_GATE" ]]; do sleep 0.05; done
fi
printf '#!/bin/sh\necho built by fake go %%s\n' "$$ $RANDOM" >"$out"
chmod 755 "$out"
echo "$out" >>%q
`, real, f.calls)
	dpkgScript := fmt.Sprintf(`#!/bin/bash
case "$1 $2" in
"-L runc") echo %[1]s/sbin/runc ;;
"-L containernetworking-plugins") printf '%%s\n' %[1]s/cni/bridge %[1]s/cni/loopback %[1]s/cni/host-local ;;
-W*) echo 0.0-fake ;;
*) exit 1 ;;
esac
`, debian)
	for name, text := range map[string]string{"go": goScript, "dpkg-query": dpkgScript} {
		if err := os.WriteFile(filepath.Join(f.dir, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", f.dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKE_GO_FAIL", "")
	t.Setenv("FAKE_GO_GATE", "")
	return f
}

// builds returns the -o files of the go builds so far.
func (f *fakeTools) builds(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(f.calls)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(data))
}

// builtNames returns the binary names of the go builds so far, sorted.
func (f *fakeTools) builtNames(t *testing.T) []string {
	var names []string
	for _, b := range f.builds(t) {
		names = append(names, filepath.Base(b))
	}
	slices.Sort(names)
	return names
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// checkEntry checks that dir is a complete entry built from s's modules,
// and that nothing half-built is left next to it.
func checkEntry(t *testing.T, s buildScript, dir string) {
	t.Helper()
	for _, f := range s.files {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s in %s: %v, mode %v; want an executable file", f, dir, err, fi)
		}
	}
	if m, err := os.ReadFile(filepath.Join(dir, "MANIFEST")); err != nil || string(m) != s.manifestOf(t) {
		t.Errorf("MANIFEST %q (%v), want %q", m, err, s.manifestOf(t))
	}
	builds, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), ".build-*"))
	olds, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), ".old-*"))
	if leftovers := append(builds, olds...); len(leftovers) != 0 {
		t.Errorf("temporary directories left: %v", leftovers)
	}
}

// A cold cache is built into a temporary directory next to the entry,
// which is then renamed into place.
func TestScriptColdCacheBuildsAndRenames(t *testing.T) {
	forEachScript(t, func(t *testing.T, s buildScript, f *fakeTools) {
		want := s.printDir(t)
		if got := s.run(t); got != want {
			t.Errorf("printed %q, --print-dir says %q", got, want)
		}
		checkEntry(t, s, want)
		if got := f.builtNames(t); !slices.Equal(got, sorted(s.built)) {
			t.Errorf("built %v, want each of %v once", got, s.built)
		}
		for _, b := range f.builds(t) {
			tmp := filepath.Dir(b)
			if filepath.Dir(tmp) != filepath.Dir(want) || !strings.HasPrefix(filepath.Base(tmp), ".build-"+filepath.Base(want)+".") {
				t.Errorf("built %s, want it in a .build-%s.* directory next to %s", b, filepath.Base(want), want)
			}
		}
	})
}

func TestScriptReusesCompleteCache(t *testing.T) {
	forEachScript(t, func(t *testing.T, s buildScript, f *fakeTools) {
		dir := s.run(t)
		n := len(f.builds(t))
		if got := s.run(t); got != dir {
			t.Errorf("second run printed %q, want %q", got, dir)
		}
		if b := f.builds(t)[n:]; len(b) != 0 {
			t.Errorf("second run with a complete cache built %v", b)
		}
	})
}

// An entry built from other go.mod/go.sum files is rebuilt whole: none of
// its binaries is reused.
func TestScriptStaleManifestRebuildsAll(t *testing.T) {
	forEachScript(t, func(t *testing.T, s buildScript, f *fakeTools) {
		dir := s.run(t)
		if err := os.WriteFile(filepath.Join(dir, "MANIFEST"), []byte("stale\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		n := len(f.builds(t))
		s.run(t)
		var again []string
		for _, b := range f.builds(t)[n:] {
			again = append(again, filepath.Base(b))
		}
		if slices.Sort(again); !slices.Equal(again, sorted(s.built)) {
			t.Errorf("rebuilt %v, want all of %v", again, s.built)
		}
		checkEntry(t, s, dir)
	})
}

// An entry that is current but lacks a binary (made before that binary
// joined the list, or the file was removed) gains it; the others are kept
// as they are, not rebuilt.
func TestScriptMissingBinaryBuiltAlone(t *testing.T) {
	forEachScript(t, func(t *testing.T, s buildScript, f *fakeTools) {
		dir := s.run(t)
		gone := s.built[len(s.built)-1]
		if err := os.Remove(filepath.Join(dir, gone)); err != nil {
			t.Fatal(err)
		}
		before := map[string]os.FileInfo{}
		for _, b := range s.built[:len(s.built)-1] {
			fi, err := os.Stat(filepath.Join(dir, b))
			if err != nil {
				t.Fatal(err)
			}
			before[b] = fi
		}
		n := len(f.builds(t))
		s.run(t)
		if got := f.builds(t)[n:]; len(got) != 1 || filepath.Base(got[0]) != gone {
			t.Errorf("built %v, want %s alone", got, gone)
		}
		for b, fi := range before {
			now, err := os.Stat(filepath.Join(dir, b))
			if err != nil || !os.SameFile(fi, now) {
				t.Errorf("%s was replaced (%v), want the same file kept", b, err)
			}
		}
		checkEntry(t, s, dir)
	})
}

// Two runs at once build once: the second waits for the first's lock and
// then finds the entry complete.
func TestScriptConcurrentRunsBuildOnce(t *testing.T) {
	forEachScript(t, func(t *testing.T, s buildScript, f *fakeTools) {
		t.Setenv("FAKE_GO_GATE", f.gate)
		first := exec.Command(s.path)
		var firstOut, firstErr strings.Builder
		first.Stdout, first.Stderr = &firstOut, &firstErr
		if err := first.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { _, err := os.Stat(f.gate + ".waiting"); return err == nil })

		second, secondOut, secondErr := startUntilWaiting(t, s.path, "waiting for another build")
		if err := os.WriteFile(f.gate, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := first.Wait(); err != nil {
			t.Fatalf("first run: %v\n%s", err, firstErr.String())
		}
		if err := second.Wait(); err != nil {
			data, _ := os.ReadFile(secondErr.Name())
			t.Fatalf("second run: %v\n%s", err, data)
		}
		if a, b := strings.TrimSpace(firstOut.String()), strings.TrimSpace(secondOut.String()); a != b || a == "" {
			t.Errorf("runs printed %q and %q, want the same directory", a, b)
		}
		if got := f.builtNames(t); !slices.Equal(got, sorted(s.built)) {
			t.Errorf("two runs built %v, want each of %v once", got, s.built)
		}
		checkEntry(t, s, strings.TrimSpace(firstOut.String()))
	})
}

// A rebuild that fails leaves the old entry as it was and no half-built
// directory behind.
func TestScriptFailedRebuildKeepsOldCache(t *testing.T) {
	forEachScript(t, func(t *testing.T, s buildScript, f *fakeTools) {
		dir := s.run(t)
		if err := os.WriteFile(filepath.Join(dir, "MANIFEST"), []byte("stale manifest\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Setenv("FAKE_GO_FAIL", "1")
		out, err := exec.Command(s.path).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("script with a failing go build: %v, want a non-zero exit\n%s", err, out)
		}
		if !strings.Contains(string(out), "building "+s.built[0]) || !strings.Contains(string(out), "failed") {
			t.Errorf("output does not say what failed:\n%s", out)
		}
		if m, err := os.ReadFile(filepath.Join(dir, "MANIFEST")); err != nil || string(m) != "stale manifest\n" {
			t.Errorf("old cache entry changed: MANIFEST %q, %v", m, err)
		}
		leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), ".build-*"))
		if len(leftovers) != 0 {
			t.Errorf("half-built directories left: %v", leftovers)
		}
	})
}

// A prebuilt directory is only checked: it must hold every binary, and the
// error names the one it lacks.
func TestScriptChecksPrebuiltDirectory(t *testing.T) {
	forEachScript(t, func(t *testing.T, s buildScript, f *fakeTools) {
		for _, tc := range []struct {
			name    string
			missing string // a file left out of the directory, or ""
		}{
			{"complete", ""},
			{"first missing", s.files[0]},
			{"last missing", s.files[len(s.files)-1]},
		} {
			t.Run(tc.name, func(t *testing.T) {
				dir := t.TempDir()
				for _, b := range s.files {
					if b == tc.missing {
						continue
					}
					if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, b)), 0o755); err != nil {
						t.Fatal(err)
					}
					writeExecutable(t, filepath.Join(dir, b), 0o755)
				}
				t.Setenv(s.env, dir)
				out, err := exec.Command(s.path).CombinedOutput()
				if (err == nil) != (tc.missing == "") {
					t.Fatalf("script: %v, want success %v\n%s", err, tc.missing == "", out)
				}
				if tc.missing == "" {
					if strings.TrimSpace(string(out)) != dir {
						t.Errorf("printed %q, want %q", out, dir)
					}
					return
				}
				for _, want := range []string{s.env + "=" + dir, "lacks executable " + tc.missing} {
					if !strings.Contains(string(out), want) {
						t.Errorf("error does not say %q:\n%s", want, out)
					}
				}
				if len(f.builds(t)) != 0 {
					t.Errorf("built %v with a prebuilt directory", f.builds(t))
				}
			})
		}
	})
}

// The node script builds the kubelet, whose packages the control plane's
// binaries share, only once a control-plane build in progress has ended
// (its lock), and containerd before that.
func TestNodeScriptBuildsKubeletAfterControlPlaneBuild(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	for _, other := range buildScripts {
		t.Setenv(other.env, "")
	}
	f := newFakeTools(t)
	controlplane, node := buildScripts[0], buildScripts[1]
	root := filepath.Dir(controlplane.printDir(t))
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.Create(filepath.Join(root, ".lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	// What a control-plane build holds while it builds.
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	cmd, stdout, stderr := startUntilWaiting(t, node.path, "waiting for the control plane's build")
	if got, want := f.builtNames(t), sorted(node.built[:len(node.built)-1]); !slices.Equal(got, want) {
		t.Errorf("built %v while the control plane's build held its lock, want %v", got, want)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		data, _ := os.ReadFile(stderr.Name())
		t.Fatalf("%s: %v\n%s", node.path, err, data)
	}
	if got := f.builtNames(t); !slices.Equal(got, sorted(node.built)) {
		t.Errorf("built %v, want each of %v once", got, node.built)
	}
	checkEntry(t, node, strings.TrimSpace(stdout.String()))
}

// startUntilWaiting starts script and returns once its standard error (a
// file) holds says, which the script prints when it blocks on a lock.
func startUntilWaiting(t *testing.T, script, says string) (cmd *exec.Cmd, stdout *strings.Builder, stderr *os.File) {
	t.Helper()
	cmd = exec.Command(script)
	stdout = &strings.Builder{}
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stderr.Close() })
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		data, _ := os.ReadFile(stderr.Name())
		return strings.Contains(string(data), says)
	})
	return cmd, stdout, stderr
}
