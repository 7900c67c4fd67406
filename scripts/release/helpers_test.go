package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writeTree writes files (slash-separated path -> content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// runGit runs git in dir with a fixed identity and fails the test on error.
func runGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=release-test", "GIT_AUTHOR_EMAIL=release-test@example.invalid",
		"GIT_COMMITTER_NAME=release-test", "GIT_COMMITTER_EMAIL=release-test@example.invalid")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// initRepo makes dir a git repository holding files, committed, with an
// identity for the commits and tags the tool makes.
func initRepo(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	writeTree(t, dir, files)
	runGit(t, dir, "init", "-q")
	setIdentity(t, dir)
	commitAll(t, dir, "initial")
}

func setIdentity(t *testing.T, dir string) {
	t.Helper()
	runGit(t, dir, "config", "user.name", "release-test")
	runGit(t, dir, "config", "user.email", "release-test@example.invalid")
}

func commitAll(t *testing.T, dir, msg string) {
	t.Helper()
	runGit(t, dir, "add", "-A")
	runGit(t, dir, "commit", "-q", "--allow-empty", "-m", msg)
}

func openRepo(t *testing.T, dir string) *Repo {
	t.Helper()
	r, err := OpenRepo(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fixture is a small repository shaped like dranode: a released set {a, b}
// with b requiring a, an unreleased app requiring both, a compat module
// outside go.work, all prepared (siblings at the set's version), the
// repository's LICENSE at the root and named in the released modules'
// READMEs, and their release notes.
func fixture() map[string]string {
	return map[string]string{
		"LICENSE":        repoLicence,
		"a/README.md":    "# a\n\n## Licence\n\nApache-2.0.\n",
		"b/README.md":    "# b\n\n## Licence\n\nApache-2.0.\n",
		"a/" + notesFile: "# Release notes\n\n## v0.1.0\n\nFirst release.\n",
		"b/" + notesFile: "# Release notes\n\n## v0.1.0\n\nFirst release.\n",
		"go.work":        "go 1.26.0\n\nuse (\n\t./a\n\t./b\n\t./app\n)\n",
		"versions.yaml": `module-sets:
  core:
    version: v0.1.0
    modules: [a, b]
excluded-modules: [app]
`,
		"a/go.mod": "module github.com/dranode/dranode/a\n\ngo 1.26.0\n\nrequire example.com/dep v1.0.0\n",
		"a/a.go":   "// Package a is a fixture.\npackage a\n\n// A is exported.\nfunc A() int { return 1 }\n",
		"b/go.mod": "module github.com/dranode/dranode/b\n\ngo 1.26.0\n\nrequire github.com/dranode/dranode/a v0.1.0\n\nreplace github.com/dranode/dranode/a => ../a\n",
		"b/b.go":   "// Package b is a fixture.\npackage b\n\nimport \"github.com/dranode/dranode/a\"\n\n// B is exported.\nfunc B() int { return a.A() }\n",
		"app/go.mod": `module github.com/dranode/dranode/app

go 1.26.0

require (
	example.com/dep v1.0.0
	github.com/dranode/dranode/a v0.1.0
	github.com/dranode/dranode/b v0.1.0
)

replace (
	github.com/dranode/dranode/a => ../a
	github.com/dranode/dranode/b => ../b
)
`,
		"compat/x/go.mod": "module github.com/dranode/dranode/compat/x\n\ngo 1.26.0\n\nrequire github.com/dranode/dranode/b v0.1.0\n\nreplace github.com/dranode/dranode/b => ../../b\n",
	}
}

// repoLicence is this repository's LICENSE.
var repoLicence = func() string {
	data, err := os.ReadFile("../../" + licenceFile)
	if err != nil {
		panic(err)
	}
	return string(data)
}()

const pseudo = "v0.0.0-00010101000000-000000000000"
