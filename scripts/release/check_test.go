package main

import (
	"strings"
	"testing"
)

// Each rule of Check is proved on a scratch copy of the fixture broken in
// one way: the problem must be reported, naming the module and the fix.
func TestCheckRules(t *testing.T) {
	tests := []struct {
		name string
		edit func(files map[string]string)
		want []string // substrings of the problems; none: no problem
	}{
		{name: "prepared fixture passes"},
		{
			name: "go.work module in no set",
			edit: func(f map[string]string) {
				f["go.work"] = strings.Replace(f["go.work"], "./app\n", "./app\n\t./d\n", 1)
				f["d/go.mod"] = "module github.com/dranode/dranode/d\n\ngo 1.26.0\n"
			},
			want: []string{`module "d" (in go.work) is in no module set and not in excluded-modules; add it to one`},
		},
		{
			name: "versions.yaml lists a module go.work does not use",
			edit: func(f map[string]string) {
				f["versions.yaml"] = strings.Replace(f["versions.yaml"], "[app]", "[app, compat/x]", 1)
			},
			want: []string{`module "compat/x" is not used by go.work; remove it from versions.yaml or add ./compat/x to go.work`},
		},
		{
			name: "third-party dependency at two versions",
			edit: func(f map[string]string) {
				f["app/go.mod"] = strings.Replace(f["app/go.mod"], "example.com/dep v1.0.0", "example.com/dep v1.1.0", 1)
			},
			want: []string{"example.com/dep is required at different versions: v1.0.0 by a; v1.1.0 by app"},
		},
		{
			name: "released sibling at a pseudo-version",
			edit: func(f map[string]string) {
				f["b/go.mod"] = strings.Replace(f["b/go.mod"], "a v0.1.0", "a "+pseudo, 1)
			},
			want: []string{"b/go.mod requires github.com/dranode/dranode/a " + pseudo + ", but versions.yaml releases it at v0.1.0 (set \"core\"); run: make release-prepare SET=core"},
		},
		{
			name: "module outside go.work at an old version",
			edit: func(f map[string]string) {
				f["compat/x/go.mod"] = strings.Replace(f["compat/x/go.mod"], "b v0.1.0", "b v0.0.9", 1)
			},
			want: []string{"compat/x/go.mod requires github.com/dranode/dranode/b v0.0.9"},
		},
		{
			name: "sibling without replace",
			edit: func(f map[string]string) {
				f["b/go.mod"] = strings.Replace(f["b/go.mod"], "replace github.com/dranode/dranode/a => ../a\n", "", 1)
			},
			want: []string{`b/go.mod requires github.com/dranode/dranode/a without "replace github.com/dranode/dranode/a => ../a"`},
		},
		{
			name: "replace to the wrong directory",
			edit: func(f map[string]string) {
				f["compat/x/go.mod"] = strings.Replace(f["compat/x/go.mod"], "=> ../../b", "=> ../b", 1)
			},
			want: []string{`compat/x/go.mod requires github.com/dranode/dranode/b without "replace github.com/dranode/dranode/b => ../../b"`},
		},
		{
			name: "released module requires an unreleased sibling",
			edit: func(f map[string]string) {
				f["a/go.mod"] += "\nrequire github.com/dranode/dranode/app " + pseudo + "\n\nreplace github.com/dranode/dranode/app => ../app\n"
			},
			want: []string{"a is released but requires github.com/dranode/dranode/app, which is never released"},
		},
		{
			name: "no licence",
			edit: func(f map[string]string) { delete(f, "LICENSE") },
			want: []string{
				"module a has no licence its users receive: neither a/LICENSE nor LICENSE at the root exists",
				"module compat/x has no licence its users receive",
			},
		},
		{
			name: "a licence no scanner knows",
			edit: func(f map[string]string) { f["LICENSE"] = "All rights reserved, except what the authors allow.\n" },
			want: []string{"module a has no licence its users receive: LICENSE: no recognised licence"},
		},
		{
			name: "a module's own licence, not the one its README names",
			edit: func(f map[string]string) { f["b/LICENSE"] = mitLicence },
			want: []string{`b/README.md's "## Licence" section does not name MIT, the licence of b/LICENSE`},
		},
		{
			name: "README without the licence",
			edit: func(f map[string]string) {
				f["a/README.md"] = "# a\n\n## Licensing\n\nApache-2.0\n"
				f["app/README.md"] = "# app\n\n## Licence\n\nsee the root\n\n## More\n\nApache-2.0\n"
			},
			want: []string{
				`a/README.md has no "## Licence" section; add one naming Apache-2.0 (from LICENSE)`,
				`app/README.md's "## Licence" section does not name Apache-2.0, the licence of LICENSE`,
			},
		},
		{
			name: "released module without README",
			edit: func(f map[string]string) { delete(f, "b/README.md") },
			want: []string{`b is released but has no README.md`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := fixture()
			if tt.edit != nil {
				tt.edit(files)
			}
			dir := t.TempDir()
			writeTree(t, dir, files)
			problems := Check(openRepo(t, dir))
			all := strings.Join(problems, "\n")
			if len(tt.want) == 0 && len(problems) > 0 {
				t.Fatalf("want no problem, got:\n%s", all)
			}
			for _, w := range tt.want {
				if !strings.Contains(all, w) {
					t.Errorf("want a problem containing\n\t%s\ngot:\n%s", w, all)
				}
			}
		})
	}
}

func TestParseVersionsRefuses(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"not semver", "module-sets:\n  s: {version: \"1.0\", modules: [a]}\n", `module set "s": version "1.0" is not a semantic version`},
		{"not canonical", "module-sets:\n  s: {version: v1.0, modules: [a]}\n", `version "v1.0" is not a semantic version`},
		{"v2 without path suffix", "module-sets:\n  s: {version: v2.0.0, modules: [a]}\n", `version "v2.0.0" needs a /v2 suffix`},
		{"module in two places", "module-sets:\n  s: {version: v0.1.0, modules: [a]}\nexcluded-modules: [a]\n", `module "a" is listed twice`},
		{"empty set", "module-sets:\n  s: {version: v0.1.0}\n", `module set "s" has no modules`},
		{"not a directory", "module-sets:\n  s: {version: v0.1.0, modules: [./a]}\n", `"./a" is not a module directory`},
		{"unknown key", "module-sets:\n  s: {version: v0.1.0, modules: [a]}\nexclude-modules: [b]\n", "field exclude-modules not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseVersions([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseVersions: got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// mitLicence is the MIT licence's text (opensource.org).
const mitLicence = `Copyright (c) 2026 Someone

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
`
