package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
)

// forbiddenInConsumers are modules a vendor importing a library module must
// never have to resolve, whatever the module: the test control plane's
// source is k8s.io/kubernetes.
var forbiddenInConsumers = []string{"k8s.io/kubernetes"}

// Consumers proves that every released module works for a user outside the
// repository: for each, alone, a fresh module with no replace gets it from
// the proxy at proxyDir, imports every importable package, tidies and
// builds, and resolves no unreleased module of this repository. Then each
// app (an unreleased module such as examples/piecemeal-driver) is copied
// from the tagged commit, its replace directives removed, and built against
// the released modules only.
func Consumers(r *Repo, proxyDir string, apps []string, log io.Writer) error {
	proxyDir, err := filepath.Abs(proxyDir)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "dranode-consumers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	g, err := newGoEnv(filepath.Join(tmp, "modcache"), "file://"+filepath.ToSlash(proxyDir))
	if err != nil {
		return err
	}
	defer g.close()

	released := r.Versions.Released()
	dirs := slices.Sorted(maps.Keys(released))
	forbidden := append([]string(nil), forbiddenInConsumers...)
	for _, d := range r.DirsSorted() {
		if _, ok := released[d]; !ok {
			forbidden = append(forbidden, r.Modules[d].Path)
		}
	}
	var failed []string
	for _, d := range dirs {
		m := module.Version{Path: ModulePath(d), Version: released[d]}
		start := time.Now()
		if err := consumeModule(g, filepath.Join(tmp, "consumer-"+strings.ReplaceAll(d, "/", "-")), m, proxyDir, forbidden); err != nil {
			fmt.Fprintf(log, "FAIL %s (%.1fs): %v\n", m, time.Since(start).Seconds(), err)
			failed = append(failed, m.String())
			continue
		}
		fmt.Fprintf(log, "ok   %s (%.1fs)\n", m, time.Since(start).Seconds())
	}
	for _, app := range apps {
		start := time.Now()
		if err := consumeApp(g, r, filepath.Join(tmp, "app-"+strings.ReplaceAll(app, "/", "-")), app, forbidden); err != nil {
			fmt.Fprintf(log, "FAIL %s (%.1fs): %v\n", app, time.Since(start).Seconds(), err)
			failed = append(failed, app)
			continue
		}
		fmt.Fprintf(log, "ok   %s from released modules only (%.1fs)\n", app, time.Since(start).Seconds())
	}
	if len(failed) > 0 {
		return fmt.Errorf("consumers failed for %s", strings.Join(failed, ", "))
	}
	return nil
}

func consumeModule(g *goEnv, dir string, m module.Version, proxyDir string, forbidden []string) error {
	escPath, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(proxyDir, filepath.FromSlash(escPath), "@v", m.Version+".zip")); err != nil {
		return fmt.Errorf("the proxy holds no %s: tag the release (release tag) and build the proxy (release proxy) first", m)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if _, err := g.run(dir, "go", "mod", "init", "example.com/consumer"); err != nil {
		return err
	}
	if _, err := g.run(dir, "go", "get", m.String()); err != nil {
		return err
	}
	out, err := g.run(dir, "go", "list", "-f", `{{if and (ne .Name "main") (or .GoFiles .CgoFiles)}}{{.ImportPath}}{{end}}`, m.Path+"/...")
	if err != nil {
		return err
	}
	var imports []string
	for _, p := range strings.Fields(out) {
		if !isInternal(p) {
			imports = append(imports, p)
		}
	}
	var src strings.Builder
	src.WriteString("// Command consumer imports every importable package of " + m.String() + ".\npackage main\n\nimport (\n")
	for _, p := range imports {
		fmt.Fprintf(&src, "\t_ %q\n", p)
	}
	src.WriteString(")\n\nfunc main() {}\n")
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src.String()), 0o644); err != nil {
		return err
	}
	// tidy resolves the whole module graph, as a user's "go mod tidy"
	// does: an unresolvable requirement of any dependency fails here even
	// when the build would not need it.
	// The module's own commands too (go install m/cmd/x@version is how a
	// user gets them), in the same build.
	for _, args := range [][]string{{"mod", "tidy"}, {"build", "./...", m.Path + "/..."}} {
		if _, err := g.run(dir, "go", args...); err != nil {
			return err
		}
	}
	return checkForbidden(g, dir, forbidden)
}

func isInternal(importPath string) bool {
	for _, e := range strings.Split(importPath, "/") {
		if e == "internal" {
			return true
		}
	}
	return false
}

// checkForbidden fails when the consumer's module graph holds a module no
// user of a released module should resolve.
func checkForbidden(g *goEnv, dir string, forbidden []string) error {
	out, err := g.run(dir, "go", "list", "-m", "all")
	if err != nil {
		return err
	}
	bad := map[string]bool{}
	for _, f := range forbidden {
		bad[f] = true
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && bad[f[0]] {
			return fmt.Errorf("go list -m all lists %s, which a user of the released modules must not need:\n%s", line, out)
		}
	}
	return nil
}

// consumeApp builds app as its copy at the tagged commit, with every replace
// directive removed, so only released modules can satisfy it.
func consumeApp(g *goEnv, r *Repo, dir, app string, forbidden []string) error {
	commit, err := releasedCommit(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tarball := dir + ".tar"
	if _, err := git(r.Root, "archive", "--format=tar", "-o", tarball, commit, app); err != nil {
		return err
	}
	if _, err := g.run(dir, "tar", "-xf", tarball, "--strip-components="+fmt.Sprint(strings.Count(app, "/")+1)); err != nil {
		return err
	}
	if err := dropReplaces(filepath.Join(dir, "go.mod"), false); err != nil {
		return fmt.Errorf("%s at %s: %w", app, commit, err)
	}
	for _, args := range [][]string{{"mod", "tidy"}, {"build", "./..."}, {"vet", "./..."}} {
		if _, err := g.run(dir, "go", args...); err != nil {
			return err
		}
	}
	var others []string
	for _, f := range forbidden {
		if f != r.Modules[app].Path {
			others = append(others, f)
		}
	}
	return checkForbidden(g, dir, others)
}

// releasedCommit is the commit the current versions' tags point at (the
// newest, should they differ).
func releasedCommit(r *Repo) (string, error) {
	var newest string
	var newestTime int64
	released := r.Versions.Released()
	for d, v := range released {
		tag := TagName(d, v)
		out, err := git(r.Root, "log", "-1", "--format=%H %ct", tag+"^{commit}")
		if err != nil {
			return "", fmt.Errorf("no commit for %s (tag the release first): %w", tag, err)
		}
		var hash string
		var t int64
		if _, err := fmt.Sscan(out, &hash, &t); err != nil {
			return "", fmt.Errorf("git log %s: %q: %w", tag, out, err)
		}
		if t > newestTime || newest == "" {
			newest, newestTime = hash, t
		}
	}
	if newest == "" {
		return "", fmt.Errorf("versions.yaml releases no module")
	}
	return newest, nil
}

// dropReplaces removes the replace directives of a go.mod (only those to
// local directories when dirsOnly): what a user of the module gets.
func dropReplaces(gomod string, dirsOnly bool) error {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return err
	}
	f, err := modfile.Parse(gomod, data, nil)
	if err != nil {
		return err
	}
	for _, rep := range append([]*modfile.Replace(nil), f.Replace...) {
		if dirsOnly && !modfile.IsDirectoryPath(rep.New.Path) {
			continue
		}
		if err := f.DropReplace(rep.Old.Path, rep.Old.Version); err != nil {
			return err
		}
	}
	f.Cleanup()
	return os.WriteFile(gomod, modfile.Format(f.Syntax), 0o644)
}
