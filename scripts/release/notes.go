package main

import (
	"errors"
	"fmt"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// notesFile holds a released module's release notes, in its directory, so
// in its zip: a vendor reads the notes of the version it has beside the
// code. One section per version, newest first; "prepare" writes the
// section of the set's version and keeps the others.
const notesFile = "RELEASE-NOTES.md"

// notesHeader opens a notes file; %s is the module path.
const notesHeader = `# Release notes: %s

Newest first. Each section is written by "make release-prepare"
(scripts/release): the API changes gorelease finds against the module's
previous release tag, the changes of its requirements, and the commits
that touched this directory since that tag.
`

// moduleNotes is what a module's section says.
type moduleNotes struct {
	dir, version string
	base         string // the previous release tag's version; "": first release
	// api is gorelease's report against base, "" when nothing but go.mod
	// changed (no API change possible) or for a first release.
	api      string
	requires []string // changed requirements, "path old → new"
	commits  []string // "hash subject", newest first
	// For a first release: how many commits made the module, since when,
	// and its packages with their synopses.
	count    int
	since    string
	packages []string
}

// prepareNotes writes the notes section of the set's version into each
// module's notesFile. api returns gorelease's report for a module with a
// previous release whose files (go.mod aside) changed since it; it is
// called only when one does, since it is the slow part.
func prepareNotes(r *Repo, set ModuleSet, api func(dir, base string) (string, error)) ([]Change, error) {
	var changes []Change
	for _, dir := range set.Modules {
		n, err := gatherNotes(r, dir, set.Version, api)
		if err != nil {
			return changes, fmt.Errorf("release notes of %s: %w", dir, err)
		}
		file := filepath.Join(r.Root, filepath.FromSlash(dir), notesFile)
		old, err := os.ReadFile(file)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return changes, err
		}
		updated, was := withSection(string(old), ModulePath(dir), set.Version, n.render())
		if updated == string(old) {
			continue
		}
		if err := os.WriteFile(file, []byte(updated), 0o644); err != nil {
			return changes, err
		}
		changes = append(changes, Change{Module: dir, Requires: notesFile + " section " + set.Version, From: was, To: "written"})
	}
	return changes, nil
}

// gatherNotes collects module dir's changes since its last release tag
// below version.
func gatherNotes(r *Repo, dir, version string, api func(dir, base string) (string, error)) (*moduleNotes, error) {
	n := &moduleNotes{dir: dir, version: version}
	tags, err := ReleaseTags(r, dir)
	if err != nil {
		return nil, err
	}
	for _, t := range tags {
		if semver.Compare(t, version) < 0 {
			n.base = t
		}
	}
	own := modulePathspec(r, dir)
	if n.base == "" {
		out, err := git(r.Root, append([]string{"log", "--reverse", "--format=%as"}, own...)...)
		if err != nil {
			return nil, err
		}
		dates := strings.Fields(out)
		if n.count = len(dates); n.count > 0 {
			n.since = dates[0]
		}
		n.packages, err = packageSynopses(r, dir)
		return n, err
	}
	tag := TagName(dir, n.base)
	out, err := git(r.Root, append([]string{"log", "--format=%h %s", "--abbrev=12", tag + "..HEAD"}, own...)...)
	if err != nil {
		return nil, err
	}
	if out != "" {
		n.commits = strings.Split(out, "\n")
	}
	if n.requires, err = requirementChanges(r, dir, tag); err != nil {
		return nil, err
	}
	// The API can change only with a file other than go.mod and go.sum,
	// in a commit since the tag or in the working tree.
	code := append(slices.Clone(own), ":(exclude)"+path.Join(dir, "go.mod"), ":(exclude)"+path.Join(dir, "go.sum"))
	_, diffErr := git(r.Root, append([]string{"diff", "--quiet", tag, "--"}, code...)...)
	untracked, err := git(r.Root, append([]string{"ls-files", "--others", "--exclude-standard", "--"}, code...)...)
	if err != nil {
		return nil, err
	}
	if diffErr != nil || untracked != "" {
		if n.api, err = api(dir, n.base); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// modulePathspec is the git pathspec of module dir's own files: its
// directory without the modules nested in it and without its notes.
func modulePathspec(r *Repo, dir string) []string {
	spec := []string{"--", dir, ":(exclude)" + path.Join(dir, notesFile)}
	for _, other := range r.DirsSorted() {
		if strings.HasPrefix(other, dir+"/") {
			spec = append(spec, ":(exclude)"+other)
		}
	}
	return spec
}

// requirementChanges lists the direct requirements of module dir that
// differ between the tag and the working tree.
func requirementChanges(r *Repo, dir, tag string) ([]string, error) {
	old, err := gitBytes(r.Root, "show", tag+":"+path.Join(dir, "go.mod"))
	if err != nil {
		return nil, err
	}
	direct := func(f *modfile.File) map[string]string {
		m := map[string]string{}
		for _, req := range f.Require {
			if !req.Indirect {
				m[req.Mod.Path] = req.Mod.Version
			}
		}
		return m
	}
	before, err := modfile.ParseLax(tag+":go.mod", old, nil)
	if err != nil {
		return nil, err
	}
	was, now := direct(before), direct(r.Modules[dir].File)
	var paths []string
	for p := range was {
		paths = append(paths, p)
	}
	for p := range now {
		if _, ok := was[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	var out []string
	for _, p := range paths {
		switch a, b := was[p], now[p]; {
		case a == b:
		case a == "":
			out = append(out, fmt.Sprintf("`%s` %s (new)", p, b))
		case b == "":
			out = append(out, fmt.Sprintf("`%s` %s (dropped)", p, a))
		default:
			out = append(out, fmt.Sprintf("`%s` %s → %s", p, a, b))
		}
	}
	return out, nil
}

// packageSynopses lists the packages of module dir a user can import (no
// internal, main or testdata packages, none of a nested module) with the
// first sentence of each package's documentation.
func packageSynopses(r *Repo, dir string) ([]string, error) {
	root := filepath.Join(r.Root, filepath.FromSlash(dir))
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if p != root {
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil || name == "internal" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return err
		}
		var pkgName, text string
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p, e.Name()), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				return err
			}
			pkgName = f.Name.Name
			// The package comment of doc.go, where there is one, as go doc
			// shows it; else the first file's that has one.
			if f.Doc != nil && (text == "" || e.Name() == "doc.go") {
				text = f.Doc.Text()
			}
		}
		if pkgName == "" || pkgName == "main" {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		line := fmt.Sprintf("`%s`", path.Join(ModulePath(dir), filepath.ToSlash(rel)))
		if s := new(doc.Package).Synopsis(text); s != "" {
			line += ": " + s
		}
		out = append(out, line)
		return nil
	})
	importPath := func(line string) string { return strings.Split(line, "`")[1] }
	slices.SortFunc(out, func(a, b string) int { return strings.Compare(importPath(a), importPath(b)) })
	return out, err
}

// render is the module's section for its version.
func (n *moduleNotes) render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n", n.version)
	if n.base == "" {
		fmt.Fprintf(&b, "First release of `%s`", ModulePath(n.dir))
		switch {
		case n.count == 1:
			fmt.Fprintf(&b, ", made in 1 commit on %s", n.since)
		case n.count > 1:
			fmt.Fprintf(&b, ", made in %d commits since %s", n.count, n.since)
		}
		b.WriteString(". Its packages:\n\n")
		for _, p := range n.packages {
			fmt.Fprintf(&b, "- %s\n", p)
		}
		return b.String()
	}
	tag := TagName(n.dir, n.base)
	fmt.Fprintf(&b, "Changes since %s.\n\n### API\n\n", tag)
	if n.api == "" {
		fmt.Fprintf(&b, "No file but go.mod and go.sum changed since %s: no change.\n", tag)
	} else {
		b.WriteString(renderGorelease(n.api, tag))
	}
	b.WriteString("\n### Requirements\n\n")
	if len(n.requires) == 0 {
		b.WriteString("No direct requirement changed.\n")
	}
	for _, req := range n.requires {
		fmt.Fprintf(&b, "- %s\n", req)
	}
	b.WriteString("\n### Commits\n\n")
	if len(n.commits) == 0 {
		fmt.Fprintf(&b, "None touched `%s/` since %s.\n", n.dir, tag)
		return b.String()
	}
	fmt.Fprintf(&b, "%d touched `%s/` since %s, newest first:\n\n", len(n.commits), n.dir, tag)
	for _, c := range n.commits {
		hash, subject, _ := strings.Cut(c, " ")
		fmt.Fprintf(&b, "- `%s` %s\n", hash, subject)
	}
	return b.String()
}

// renderGorelease turns gorelease's report ("# <package>", "## compatible
// changes", one finding a line, then "# summary") into Markdown: the
// findings of each package as a list under its heading, the summary left
// out (the section's version is the release's).
func renderGorelease(report, tag string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "gorelease against %s:\n", tag)
	findings := 0
	for _, line := range strings.Split(report, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "# summary":
			if findings == 0 {
				b.WriteString("\nNo change to the exported API.\n")
			}
			return b.String()
		case line == "":
		case strings.HasPrefix(line, "## "):
			fmt.Fprintf(&b, "\n%s:\n\n", strings.ToUpper(line[3:4])+line[4:])
		case line == "# diagnostics":
			b.WriteString("\n#### Diagnostics\n")
		case strings.HasPrefix(line, "# "):
			fmt.Fprintf(&b, "\n#### `%s`\n", line[2:])
		default:
			findings++
			fmt.Fprintf(&b, "- %s\n", line)
		}
	}
	if findings == 0 {
		b.WriteString("\nNo change to the exported API.\n")
	}
	return b.String()
}

// withSection returns the notes file old with section as the one of
// version: in place of the old one, or above the newest older version's
// (newest first). It also says what was there: "absent" or "stale".
func withSection(old, modulePath, version, section string) (string, string) {
	if old == "" {
		old = fmt.Sprintf(notesHeader, modulePath)
	}
	// The header, then one section per "## <version>" line.
	parts := strings.Split("\n"+old, "\n## ")
	head := strings.TrimSpace(parts[0])
	was, placed := "absent", false
	var sections []string
	for _, p := range parts[1:] {
		p = "## " + strings.TrimSpace(p)
		v, _, _ := strings.Cut(strings.TrimPrefix(p, "## "), "\n")
		switch {
		case strings.TrimSpace(v) == version:
			was, placed, p = "stale", true, section
		case !placed && semver.Compare(strings.TrimSpace(v), version) < 0:
			sections = append(sections, section)
			placed = true
		}
		sections = append(sections, strings.TrimSpace(p))
	}
	if !placed {
		sections = append(sections, section)
	}
	for i := range sections {
		sections[i] = strings.TrimSpace(sections[i])
	}
	return head + "\n\n" + strings.Join(sections, "\n\n") + "\n", was
}

// checkNotes: every released module's notes have a section for its set's
// version, which "prepare" writes; a release without notes cannot be
// tagged from a checked tree.
func checkNotes(r *Repo) []string {
	var problems []string
	for _, name := range r.Versions.SetNames() {
		set := r.Versions.Sets[name]
		for _, dir := range set.Modules {
			data, err := os.ReadFile(filepath.Join(r.Root, filepath.FromSlash(dir), notesFile))
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				problems = append(problems, err.Error())
				continue
			}
			if !strings.Contains("\n"+string(data), "\n## "+set.Version+"\n") {
				problems = append(problems, fmt.Sprintf("%s/%s has no section for %s, the version of set %q; run: make release-prepare SET=%s", dir, notesFile, set.Version, name, name))
			}
		}
	}
	return problems
}
