package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

// APICheck compares each given released module (all when none are given),
// as it is in the working tree, with its last release tag at or below its
// version in versions.yaml, using gorelease. An incompatible change fails
// unless versions.yaml records a bump that allows it: a new minor version
// for a v0 module, a new major version otherwise. Modules never tagged pass
// ("no release yet").
//
// gorelease loads the release as a user would, without replace directives,
// and checks the module's own go.sum; a module developed with replace
// directives has neither, so each module is checked as a staged copy:
// the working tree zipped as the proxy would, replace directives dropped and
// tidied against a proxy holding the release tags plus the untagged set
// versions from the working tree.
func APICheck(r *Repo, modules []string, goreleaseBin string, log io.Writer) error {
	released := r.Versions.Released()
	if len(modules) == 0 {
		modules = slices.Sorted(maps.Keys(released))
	}
	type job struct{ dir, base string }
	var jobs []job
	for _, d := range modules {
		v, ok := released[d]
		if !ok {
			return fmt.Errorf("module %q is not released by any module set in versions.yaml", d)
		}
		tags, err := ReleaseTags(r, d)
		if err != nil {
			return err
		}
		base := ""
		for _, t := range tags {
			if semver.Compare(t, v) <= 0 {
				base = t
			}
		}
		if base == "" {
			fmt.Fprintf(log, "ok   %s %s: no release yet\n", d, v)
			continue
		}
		jobs = append(jobs, job{d, base})
	}
	if len(jobs) == 0 {
		return nil
	}

	checked := make([]string, len(jobs))
	for i, j := range jobs {
		checked[i] = j.dir
	}
	d, err := newAPIDiffer(r, checked, goreleaseBin)
	if err != nil {
		return err
	}
	defer d.close()
	var failed []string
	for _, j := range jobs {
		start := time.Now()
		msg, err := d.check(j.dir, j.base, released[j.dir])
		if err != nil {
			fmt.Fprintf(log, "FAIL %s: %v\n", j.dir, err)
			failed = append(failed, j.dir)
			continue
		}
		fmt.Fprintf(log, "ok   %s %s against %s: %s (%.1fs)\n", j.dir, released[j.dir], j.base, msg, time.Since(start).Seconds())
	}
	if len(failed) > 0 {
		return fmt.Errorf("API check failed for %s", strings.Join(failed, ", "))
	}
	return nil
}

// apiDiffer runs gorelease on staged copies of the modules it was made for
// (APICheck says why staged), in apicheck's shared module cache, which it
// holds locked until close.
type apiDiffer struct {
	r      *Repo
	g      *goEnv
	tmp    string
	bin    string
	unlock func()
}

// newAPIDiffer prepares gorelease runs for the modules checked; bin is the
// gorelease to run, "" for the one this module pins.
func newAPIDiffer(r *Repo, checked []string, bin string) (_ *apiDiffer, err error) {
	tmp, err := os.MkdirTemp("", "dranode-apicheck-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	proxyDir := filepath.Join(tmp, "proxy")
	if err := buildPendingProxy(r, proxyDir, checked); err != nil {
		return nil, err
	}
	if bin == "" {
		if bin, err = goreleaseTool(r); err != nil {
			return nil, err
		}
	}
	modCache, unlock, err := openSharedModCache()
	if err != nil {
		return nil, err
	}
	g, err := newGoEnv(modCache, "file://"+filepath.ToSlash(proxyDir))
	if err != nil {
		unlock()
		return nil, err
	}
	return &apiDiffer{r: r, g: g, tmp: tmp, bin: bin, unlock: unlock}, nil
}

func (d *apiDiffer) close() {
	d.unlock()
	os.RemoveAll(d.tmp)
}

// goreleaseTool returns the gorelease this module pins with its "tool"
// directive. "go tool -n" builds it and prints where it is: the go command
// caches tool executables like any build output, so only the first run after
// a new toolchain or a new pin links it. It is built with the developer's own
// module cache, not apicheck's: it is not under test.
func goreleaseTool(r *Repo) (string, error) {
	cmd := exec.Command("go", "tool", "-n", "gorelease")
	cmd.Dir = filepath.Join(r.Root, "scripts", "release")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building gorelease: %w", describeExit(err))
	}
	// -n prints a command line: with an exec wrapper (go_GOOS_GOARCH_exec)
	// the wrapper would come first, which this tool does not support.
	bin := strings.TrimSpace(string(out))
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() {
		return "", fmt.Errorf("building gorelease: go tool -n gorelease printed %q, not an executable", bin)
	}
	return bin, nil
}

// buildPendingProxy serves, for the modules checked and the released
// siblings they require (at any of their release tags or in the working
// tree, transitively), the release tags plus the versions.yaml version from
// the working tree when that version is not tagged yet (unlisted), so that a
// staged module's sibling requirements resolve before the set is tagged.
// Other modules would only cost a zip each: nothing resolved from the
// checked modules reaches them.
func buildPendingProxy(r *Repo, dir string, checked []string) error {
	p, err := newProxyDir(dir)
	if err != nil {
		return err
	}
	released := r.Versions.Released()
	seen := map[string]bool{}
	todo := slices.Clone(checked)
	for len(todo) > 0 {
		d := todo[0]
		todo = todo[1:]
		if seen[d] {
			continue
		}
		seen[d] = true
		src := filepath.Join(r.Root, filepath.FromSlash(d))
		goMod, err := os.ReadFile(filepath.Join(src, "go.mod"))
		if err != nil {
			return err
		}
		goMods := [][]byte{goMod}
		tags, err := ReleaseTags(r, d)
		if err != nil {
			return err
		}
		for _, t := range tags {
			tagMod, err := p.addTag(r, d, t)
			if err != nil {
				return err
			}
			goMods = append(goMods, tagMod)
		}
		for _, data := range goMods {
			f, err := modfile.ParseLax(d+"/go.mod", data, nil)
			if err != nil {
				return err
			}
			for _, req := range f.Require {
				if sib, ok := strings.CutPrefix(req.Mod.Path, pathPrefix); ok && released[sib] != "" {
					todo = append(todo, sib)
				}
			}
		}
		v := released[d]
		if exists, err := tagExists(r.Root, TagName(d, v)); err != nil {
			return err
		} else if exists {
			continue
		}
		m := module.Version{Path: ModulePath(d), Version: v}
		if err := p.add(m, time.Now(), goMod, false, func(w io.Writer) error { return zipWorkTree(w, r, m, d) }); err != nil {
			return err
		}
	}
	return p.writeLists()
}

// report returns gorelease's report on module dir of the working tree,
// released at version, against its release tag base.
func (d *apiDiffer) report(dir, base, version string) (string, error) {
	m := module.Version{Path: ModulePath(dir), Version: version}
	stageRoot := filepath.Join(d.tmp, "stage")
	stage := filepath.Join(stageRoot, strings.ReplaceAll(dir, "/", "-"))
	if err := os.MkdirAll(stageRoot, 0o755); err != nil {
		return "", err
	}
	if err := os.RemoveAll(stage); err != nil {
		return "", err
	}
	zipFile := stage + ".zip"
	f, err := os.Create(zipFile)
	if err != nil {
		return "", err
	}
	if err := zipWorkTree(f, d.r, m, dir); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	if err := modzip.Unzip(stage, m, zipFile); err != nil {
		return "", err
	}
	if err := dropReplaces(filepath.Join(stage, "go.mod"), true); err != nil {
		return "", err
	}
	if _, err := d.g.run(stage, "go", "mod", "tidy"); err != nil {
		return "", err
	}
	args := []string{"-base=" + m.Path + "@" + base}
	if version != base {
		args = append(args, "-version="+version)
	}
	return d.g.run(stage, d.bin, args...)
}

// check applies the compatibility policy to report's findings: an
// incompatible change needs a bump that allows it.
func (d *apiDiffer) check(dir, base, version string) (string, error) {
	out, err := d.report(dir, base, version)
	if err != nil {
		return "", err
	}
	if strings.Contains(out, "## incompatible changes") && !allowsIncompatible(base, version) {
		want := semver.Major(base) + ".0.0 (a new major version)"
		if semver.Major(base) == "v0" {
			want = nextMinor(base) + " (a new minor version)"
		}
		return "", fmt.Errorf("incompatible API changes since %s, but versions.yaml releases %s at %s; bump its set to %s or later, or undo the change:\n%s",
			TagName(dir, base), dir, version, want, strings.TrimSpace(out))
	}
	return lastLine(out), nil
}

// allowsIncompatible reports whether moving from base to version may break
// the API: a major bump, or a minor bump while the major version is v0.
func allowsIncompatible(base, version string) bool {
	if semver.Compare(version, base) <= 0 {
		return false
	}
	if semver.Major(base) == "v0" {
		return semver.MajorMinor(version) != semver.MajorMinor(base)
	}
	return semver.Major(version) != semver.Major(base)
}

func nextMinor(v string) string {
	var major, minor int
	fmt.Sscanf(semver.MajorMinor(v), "v%d.%d", &major, &minor)
	return fmt.Sprintf("v%d.%d.0", major, minor+1)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
