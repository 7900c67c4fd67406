package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNotes releases the fixture's set at v0.1.0, then changes a's code in
// one commit and b's requirement in another, and prepares v0.2.0: a's notes
// carry the API report (gorelease's output here; TestReleaseFlow runs the
// real one) and its commit, b's its requirement and its commit but no API
// report (only go.mod changed, so gorelease is not run), and the v0.1.0
// sections stay below. A second prepare changes nothing.
func TestNotes(t *testing.T) {
	dir := t.TempDir()
	files := fixture()
	delete(files, "a/"+notesFile)
	delete(files, "b/"+notesFile)
	files["a/doc.go"] = "// Package a does the first thing. It also does more.\npackage a\n"
	files["a/sub/sub.go"] = "// Package sub is a's helper.\npackage sub\n"
	files["a/internal/x/x.go"] = "// Package x is internal.\npackage x\n"
	files["a/cmd/tool/main.go"] = "// Command tool is a command.\npackage main\n"
	initRepo(t, dir, files)

	var asked []string
	report := "# github.com/dranode/dranode/a\n## incompatible changes\nA: removed\n## compatible changes\nB: added\n\n# summary\nv0.2.0 is a valid semantic version for this release.\n"
	api := func(d, base string) (string, error) {
		asked = append(asked, d+"@"+base)
		return report, nil
	}
	r := openRepo(t, dir)
	set, err := r.Versions.Set("core")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prepareNotes(r, set, api); err != nil {
		t.Fatal(err)
	}
	first := readFile(t, dir, "a/"+notesFile)
	for _, w := range []string{
		"# Release notes: github.com/dranode/dranode/a\n",
		"## v0.1.0\n\nFirst release of `github.com/dranode/dranode/a`, made in 1 commit on ",
		"- `github.com/dranode/dranode/a`: Package a does the first thing.\n- `github.com/dranode/dranode/a/sub`: Package sub is a's helper.\n",
	} {
		if !strings.Contains(first, w) {
			t.Errorf("a's first notes lack %q:\n%s", w, first)
		}
	}
	if strings.Contains(first, "internal") || strings.Contains(first, "tool") {
		t.Errorf("a's first notes list an internal or main package:\n%s", first)
	}
	if len(asked) != 0 {
		t.Errorf("gorelease asked for %v on a first release", asked)
	}
	commitAll(t, dir, "notes of v0.1.0")
	runGit(t, dir, "tag", "-a", "a/v0.1.0", "-m", "a")
	runGit(t, dir, "tag", "-a", "b/v0.1.0", "-m", "b")

	writeTree(t, dir, map[string]string{"a/b.go": "package a\n\n// B is new.\nfunc B() {}\n"})
	commitAll(t, dir, "a: B")
	writeTree(t, dir, map[string]string{"b/go.mod": strings.Replace(files["b/go.mod"], "\nreplace", "\nrequire example.com/dep v1.1.0\n\nreplace", 1)})
	commitAll(t, dir, "b: require dep")
	setVersion(t, dir, "v0.1.0", "v0.2.0")
	r = openRepo(t, dir)
	set, _ = r.Versions.Set("core")
	if _, err := prepareRequirements(r, "core", set); err != nil {
		t.Fatal(err)
	}
	r = openRepo(t, dir)
	changes, err := prepareNotes(r, set, api)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 2 {
		t.Errorf("changes %v, want both modules' notes", changes)
	}
	if strings.Join(asked, " ") != "a@v0.1.0" {
		t.Errorf("gorelease asked for %v, want a@v0.1.0 only (b changed only its go.mod)", asked)
	}
	a := readFile(t, dir, "a/"+notesFile)
	b := readFile(t, dir, "b/"+notesFile)
	for _, w := range []string{
		"## v0.2.0\n\nChanges since a/v0.1.0.\n\n### API\n\ngorelease against a/v0.1.0:\n\n#### `github.com/dranode/dranode/a`\n\nIncompatible changes:\n\n- A: removed\n\nCompatible changes:\n\n- B: added\n",
		"### Requirements\n\nNo direct requirement changed.\n",
		"### Commits\n\n1 touched `a/` since a/v0.1.0, newest first:\n\n- `",
		" a: B\n\n## v0.1.0\n\nFirst release",
	} {
		if !strings.Contains(a, w) && !strings.Contains(b, w) {
			t.Errorf("neither notes hold %q:\na:\n%s\nb:\n%s", w, a, b)
		}
	}
	for _, w := range []string{
		"### API\n\nNo file but go.mod and go.sum changed since b/v0.1.0: no change.\n",
		"- `example.com/dep` v1.1.0 (new)\n- `github.com/dranode/dranode/a` v0.1.0 → v0.2.0\n",
		" b: require dep\n",
	} {
		if !strings.Contains(b, w) {
			t.Errorf("b's notes lack %q:\n%s", w, b)
		}
	}
	if strings.Contains(b, "a: B") {
		t.Errorf("b's notes list a commit that touched only a:\n%s", b)
	}
	if again, err := prepareNotes(openRepo(t, dir), set, api); err != nil || len(again) != 0 {
		t.Errorf("second prepareNotes = %v, %v; want no change", again, err)
	}
	if p := checkNotes(openRepo(t, dir)); len(p) != 0 {
		t.Errorf("checkNotes after prepare: %v", p)
	}
	setVersion(t, dir, "v0.2.0", "v0.3.0")
	if p := strings.Join(checkNotes(openRepo(t, dir)), "\n"); !strings.Contains(p, `a/RELEASE-NOTES.md has no section for v0.3.0, the version of set "core"; run: make release-prepare SET=core`) {
		t.Errorf("checkNotes without the set's version's section: %s", p)
	}
}

func readFile(t *testing.T, dir, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestWithSection(t *testing.T) {
	header := "# Release notes: m\n\nintro\n"
	tests := []struct {
		name, old, version, want, was string
	}{
		{"new file", "", "v0.1.0", strings.Replace(notesHeader, "%s", "m", 1) + "\n## v0.1.0\n\nnew\n", "absent"},
		{"newest on top", header + "\n## v0.1.0\n\nold\n", "v0.2.0", header + "\n## v0.2.0\n\nnew\n\n## v0.1.0\n\nold\n", "absent"},
		{"replaced in place", header + "\n## v0.2.0\n\nstale\n\n## v0.1.0\n\nold\n", "v0.2.0", header + "\n## v0.2.0\n\nnew\n\n## v0.1.0\n\nold\n", "stale"},
		{"a patch between", header + "\n## v0.2.0\n\ntwo\n\n## v0.1.0\n\nold\n", "v0.1.1", header + "\n## v0.2.0\n\ntwo\n\n## v0.1.1\n\nnew\n\n## v0.1.0\n\nold\n", "absent"},
		{"subsections kept", header + "\n## v0.1.0\n\n### API\n\n#### `p`\n", "v0.2.0", header + "\n## v0.2.0\n\nnew\n\n## v0.1.0\n\n### API\n\n#### `p`\n", "absent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, was := withSection(tt.old, "m", tt.version, "## "+tt.version+"\n\nnew\n")
			if got != tt.want || was != tt.was {
				t.Errorf("got (%s):\n%s\nwant (%s):\n%s", was, got, tt.was, tt.want)
			}
			if again, _ := withSection(got, "m", tt.version, "## "+tt.version+"\n\nnew\n"); again != got {
				t.Errorf("a second write changed the file:\n%s", again)
			}
		})
	}
}

func TestRenderGorelease(t *testing.T) {
	tests := []struct{ name, report, want string }{
		{"no change", "# summary\nv0.2.1 is a valid semantic version for this release.\n", "gorelease against m/v0.2.0:\n\nNo change to the exported API.\n"},
		{"packages", "# example.com/m/a\n## incompatible changes\nA2: removed\n\n# example.com/m/b\n## compatible changes\npackage added\n\n# summary\nSuggested version: v0.3.0\n",
			"gorelease against m/v0.2.0:\n\n#### `example.com/m/a`\n\nIncompatible changes:\n\n- A2: removed\n\n#### `example.com/m/b`\n\nCompatible changes:\n\n- package added\n"},
		{"diagnostics", "# diagnostics\ngo.sum: one or more sums are missing.\n\n# summary\n", "gorelease against m/v0.2.0:\n\n#### Diagnostics\n- go.sum: one or more sums are missing.\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := renderGorelease(tt.report, "m/v0.2.0"); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}
