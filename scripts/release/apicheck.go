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

	tmp, err := os.MkdirTemp("", "dranode-apicheck-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	proxyDir := filepath.Join(tmp, "proxy")
	if err := buildPendingProxy(r, proxyDir); err != nil {
		return err
	}
	modCache, unlock, err := openSharedModCache()
	if err != nil {
		return err
	}
	defer unlock()
	g, err := newGoEnv(modCache, "file://"+filepath.ToSlash(proxyDir))
	if err != nil {
		return err
	}
	if goreleaseBin == "" {
		goreleaseBin = filepath.Join(tmp, "gorelease")
		// The version of gorelease is the one the tool module pins with
		// its "tool" directive.
		// gorelease is built with the developer's own module cache, not
		// the scratch one: it is not under test.
		build := exec.Command("go", "build", "-o", goreleaseBin, "golang.org/x/exp/cmd/gorelease")
		build.Dir = filepath.Join(r.Root, "scripts", "release")
		build.Env = append(os.Environ(), "GOWORK=off")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("building gorelease: %w\n%s", err, out)
		}
	}

	var failed []string
	for _, j := range jobs {
		start := time.Now()
		msg, err := apiCheckModule(g, r, filepath.Join(tmp, "stage"), j.dir, j.base, released[j.dir], goreleaseBin)
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

// buildPendingProxy serves the release tags, plus each released module at
// its versions.yaml version from the working tree when that version is not
// tagged yet (unlisted), so that a staged module's sibling requirements
// resolve before the set is tagged.
func buildPendingProxy(r *Repo, dir string) error {
	p, err := newProxyDir(dir)
	if err != nil {
		return err
	}
	for d, v := range r.Versions.Released() {
		tags, err := ReleaseTags(r, d)
		if err != nil {
			return err
		}
		for _, t := range tags {
			if err := p.addTag(r, d, t); err != nil {
				return err
			}
		}
		if exists, err := tagExists(r.Root, TagName(d, v)); err != nil {
			return err
		} else if exists {
			continue
		}
		m := module.Version{Path: ModulePath(d), Version: v}
		src := filepath.Join(r.Root, filepath.FromSlash(d))
		goMod, err := os.ReadFile(filepath.Join(src, "go.mod"))
		if err != nil {
			return err
		}
		if err := p.add(m, time.Now(), goMod, false, func(w io.Writer) error { return modzip.CreateFromDir(w, m, src) }); err != nil {
			return err
		}
	}
	return p.writeLists()
}

func apiCheckModule(g *goEnv, r *Repo, stageRoot, dir, base, version, goreleaseBin string) (string, error) {
	m := module.Version{Path: ModulePath(dir), Version: version}
	stage := filepath.Join(stageRoot, strings.ReplaceAll(dir, "/", "-"))
	if err := os.MkdirAll(stageRoot, 0o755); err != nil {
		return "", err
	}
	zipFile := stage + ".zip"
	f, err := os.Create(zipFile)
	if err != nil {
		return "", err
	}
	if err := modzip.CreateFromDir(f, m, filepath.Join(r.Root, filepath.FromSlash(dir))); err != nil {
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
	if _, err := g.run(stage, "go", "mod", "tidy"); err != nil {
		return "", err
	}
	args := []string{"-base=" + m.Path + "@" + base}
	if version != base {
		args = append(args, "-version="+version)
	}
	out, err := g.run(stage, goreleaseBin, args...)
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
