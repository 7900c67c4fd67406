package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fixture is a small repository shaped like dranode: two workspace modules
// (one with a subpackage), a compat module, a build module under another
// and a fixture module under testdata that is no module of the repository.
func fixture() map[string]string {
	return map[string]string{
		"go.work":                              "go 1.26.0\n\nuse (\n\t./core\n\t./agent\n)\n",
		"core/go.mod":                          "module github.com/dranode/dranode/core\n",
		"core/cache.go":                        "package core\n\n// Cache records claims.\ntype Cache struct{ Dir string }\n\n// LockClaim locks one claim.\nfunc (c *Cache) LockClaim(uid string) func() { return func() {} }\n\n// RecordPrepared records a claim.\nfunc RecordPrepared() {}\n",
		"core/cache_test.go":                   "package core_test\n\nimport \"testing\"\n\nfunc TestLockClaimSerializes(t *testing.T) {}\n\nfunc ExampleCache_LockClaim() {}\n",
		"core/durable/durable.go":              "package durable\n\n// WriteFile writes durably.\nfunc WriteFile() {}\n",
		"agent/go.mod":                         "module github.com/dranode/dranode/agent\n",
		"agent/agent.go":                       "package agent\n\n// Agent is the agent.\ntype Agent struct{ record int }\n\n// Refused lists refused plugins.\nfunc (a *Agent) Refused() []string { return nil }\n\n// Source is where claims come from.\ntype Source interface{ Get() }\n",
		"compat/e2e/go.mod":                    "module github.com/dranode/dranode/compat/e2e\n",
		"build/node/go.mod":                    "module github.com/dranode/dranode/build/node\n",
		"build/node/kubelet/go.mod":            "module github.com/dranode/dranode/build/node/kubelet\n",
		"compat/e2e/testdata/writer/go.mod":    "module example.com/writer\n",
		"compat/e2e/testdata/writer/writer.go": "package main\n\nfunc Gone() {}\n",
		"README.md": "# fixture\n\n## The node ([`harness`](core))\n\n" +
			"| module | what |\n|---|---|\n" +
			"| [`core`](core) | the core (`Cache.LockClaim`) |\n" +
			"| [`agent`](agent/) | the agent |\n" +
			"| `compat/*` | harnesses: [`e2e`](compat/e2e) |\n" +
			"| `build/*` | [node](build/node), [kubelet](./build/node/kubelet) |\n",
		"DESIGN.md": "# design\n\nSee [the table](#the-table), [the node](README.md#the-node-harness), [core](core/cache.go).\n\n## The table\n\n" +
			"| module | job |\n| --- | --- |\n" +
			"| `core` | `core.RecordPrepared`, `core/durable.WriteFile`, `core.Cache.LockClaim` |\n" +
			"| `agent` | `Agent.Refused`, `Source.Get`, `Agent.record` |\n" +
			"| `compat/e2e` | `TestLockClaimSerializes`, `TestLockClaim*`, `ExampleCache_LockClaim` |\n" +
			"| `build/node` | |\n| `build/node/kubelet` | |\n\n" +
			"Not checked: `cleanup.interval`, `core.go`, `go.work`, `WithClaim`, `kubeletplugin.RollingUpdate`,\n" +
			"`DRAPlugin.WatchHealthStatus`, `k8s.io/kubernetes/pkg/kubelet/cm/dra.NewManager`, `make check`,\n" +
			"`Cache.LockClaim(uid)`, a test named in the fence below, `Test` alone, `compat/e2e`.\n\n" +
			"```go\nTestSomething()\n`core.Gone`\n```\n",
	}
}

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Each way the docs can fall behind the code is made once on a copy of
// the fixture: the check must name the file, the line and what is wrong.
func TestCheckDocs(t *testing.T) {
	tests := []struct {
		name string
		edit func(f map[string]string)
		want []string // the problems, exactly; none: the fixture passes
	}{
		{name: "fixture passes"},
		{
			name: "a new module no table lists",
			edit: func(f map[string]string) {
				f["compat/fleet/go.mod"] = "module github.com/dranode/dranode/compat/fleet\n"
			},
			want: []string{
				"README.md: the module table misses module compat/fleet: add a row with `compat/fleet` in its first column, or link [fleet](compat/fleet) in a row",
				"DESIGN.md: the module table misses module compat/fleet: add a row with `compat/fleet` in its first column, or link [fleet](compat/fleet) in a row",
			},
		},
		{
			name: "a module's row removed",
			edit: func(f map[string]string) {
				f["DESIGN.md"] = strings.Replace(f["DESIGN.md"], "| `build/node/kubelet` | |\n", "", 1)
			},
			want: []string{"DESIGN.md: the module table misses module build/node/kubelet: add a row with `build/node/kubelet` in its first column, or link [kubelet](build/node/kubelet) in a row"},
		},
		{
			name: "a row for a module that is gone",
			edit: func(f map[string]string) {
				delete(f, "build/node/kubelet/go.mod")
			},
			want: []string{
				"README.md: the link to ./build/node/kubelet points to nothing in the repository (build/node/kubelet)",
				"DESIGN.md:13: the module table names `build/node/kubelet`, which is no module (no build/node/kubelet/go.mod): name the module's directory",
			},
		},
		{
			name: "no module table",
			edit: func(f map[string]string) {
				f["README.md"] = strings.Replace(f["README.md"], "| module |", "| directory |", 1)
			},
			want: []string{`README.md: no module table (a Markdown table whose first header cell is "module") listing every module`},
		},
		{
			name: "a function renamed",
			edit: func(f map[string]string) {
				f["core/cache.go"] = strings.Replace(f["core/cache.go"], "func RecordPrepared()", "func RecordDone()", 1)
			},
			want: []string{"DESIGN.md:9: `core.RecordPrepared` names no code of the repository: package core (core) declares no RecordPrepared"},
		},
		{
			name: "a method renamed",
			edit: func(f map[string]string) {
				f["core/cache.go"] = strings.Replace(f["core/cache.go"], ") LockClaim(", ") Lock(", 1)
			},
			want: []string{
				"README.md:7: `Cache.LockClaim` names no code of the repository: no type Cache of the repository has a method or field LockClaim",
				"DESIGN.md:9: `core.Cache.LockClaim` names no code of the repository: type core.Cache (core) has no method or field LockClaim",
				"DESIGN.md:17: `Cache.LockClaim(uid)` names no code of the repository: no type Cache of the repository has a method or field LockClaim",
			},
		},
		{
			name: "a package's function renamed, named by directory",
			edit: func(f map[string]string) {
				f["core/durable/durable.go"] = strings.Replace(f["core/durable/durable.go"], "WriteFile", "Write", 2)
			},
			want: []string{"DESIGN.md:9: `core/durable.WriteFile` names no code of the repository: package durable (core/durable) declares no WriteFile"},
		},
		{
			name: "an interface method and a field renamed",
			edit: func(f map[string]string) {
				f["agent/agent.go"] = strings.Replace(strings.Replace(f["agent/agent.go"], "Get()", "Claim()", 1), "record int", "rec int", 1)
			},
			want: []string{
				"DESIGN.md:10: `Source.Get` names no code of the repository: no type Source of the repository has a method or field Get",
				"DESIGN.md:10: `Agent.record` names no code of the repository: no type Agent of the repository has a method or field record",
			},
		},
		{
			name: "a link to nothing and to no heading",
			edit: func(f map[string]string) {
				f["DESIGN.md"] = strings.Replace(f["DESIGN.md"], "(core/cache.go)", "(core/gone.go)", 1)
				f["DESIGN.md"] = strings.Replace(f["DESIGN.md"], "(#the-table)", "(#a-table)", 1)
				f["DESIGN.md"] = strings.Replace(f["DESIGN.md"], "(README.md#the-node-harness)", "(README.md#the-node)", 1)
			},
			want: []string{
				"DESIGN.md: the link to #a-table names no heading of DESIGN.md",
				"DESIGN.md: the link to README.md#the-node names no heading of README.md",
				"DESIGN.md: the link to core/gone.go points to nothing in the repository (core/gone.go)",
			},
		},
		{
			name: "a test renamed",
			edit: func(f map[string]string) {
				f["core/cache_test.go"] = strings.Replace(f["core/cache_test.go"], "TestLockClaimSerializes", "TestSerializes", 1)
			},
			want: []string{
				"DESIGN.md:11: `TestLockClaimSerializes` names no code of the repository: no test, benchmark, example or fuzz function of that name",
				"DESIGN.md:11: `TestLockClaim*` names no code of the repository: no test, benchmark, example or fuzz function with that prefix",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files := fixture()
			if tc.edit != nil {
				tc.edit(files)
			}
			got, err := CheckDocs(writeTree(t, files), DocFiles)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

func TestCheckDocsUnparsableCode(t *testing.T) {
	files := fixture()
	files["core/broken.go"] = "package core\n\nfunc {\n"
	_, err := CheckDocs(writeTree(t, files), DocFiles)
	if err == nil || !strings.Contains(err.Error(), "broken.go") {
		t.Fatalf("CheckDocs with a file that does not parse: %v, want an error naming broken.go", err)
	}
}

func TestModulesLeavesOutTestdata(t *testing.T) {
	got, err := Modules(writeTree(t, fixture()))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"agent", "build/node", "build/node/kubelet", "compat/e2e", "core"}
	if !slices.Equal(got, want) {
		t.Errorf("Modules = %v, want %v", got, want)
	}
}

func TestCodeSpans(t *testing.T) {
	for _, tc := range []struct {
		text string
		want []Span
	}{
		{"a `b` c ``d ` e`` f", []Span{{1, "b"}, {1, "d ` e"}}},
		{"x\n`across\nlines` y\n`z`", []Span{{2, "across lines"}, {4, "z"}}},
		{"```\n`fenced`\n```\n`after`", []Span{{4, "after"}}},
		{"an ` unclosed one", nil},
	} {
		if got := CodeSpans(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("CodeSpans(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

func TestTables(t *testing.T) {
	text := "intro\n\n| module | job |\n|:---|---:|\n| `a` | x \\| y |\n| `b|c` | z |\n\nafter\n| not | a table |\n"
	got := Tables(text)
	if len(got) != 1 {
		t.Fatalf("Tables found %d tables, want 1: %+v", len(got), got)
	}
	want := []Row{{5, []string{"`a`", "x | y"}}, {6, []string{"`b|c`", "z"}}}
	if len(got[0].Rows) != len(want) {
		t.Fatalf("rows %+v, want %+v", got[0].Rows, want)
	}
	for i, r := range got[0].Rows {
		if r.Line != want[i].Line || !slices.Equal(r.Cells, want[i].Cells) {
			t.Errorf("row %d = %+v, want %+v", i, r, want[i])
		}
	}
}

func TestAnchors(t *testing.T) {
	got := Anchors("# dranode — design\n## The agent's parts\n### Lock order\n## Tests\n## Tests\n```\n# not a heading\n```\n#not a heading either\n## `make check`: 50 minutes\n")
	for _, want := range []string{"dranode--design", "the-agents-parts", "lock-order", "tests", "tests-1", "make-check-50-minutes"} {
		if !got[want] {
			t.Errorf("Anchors lacks %q: %v", want, got)
		}
	}
	if len(got) != 6 {
		t.Errorf("Anchors = %v, want 6", got)
	}
}
