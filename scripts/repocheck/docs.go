package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// DocFiles are the files "docs" checks, relative to the root: the ones a
// newcomer reads first, whose module tables list every module.
var DocFiles = []string{"README.md", "DESIGN.md"}

// modulePrefix is the module path of the repository root: the package in
// directory d has the import path modulePrefix+d.
const modulePrefix = "github.com/dranode/dranode/"

// CheckDocs checks files (relative to root) against the repository's
// modules and code and returns the problems found, each naming the file,
// the line where there is one, and what to change.
func CheckDocs(root string, files []string) ([]string, error) {
	modules, err := Modules(root)
	if err != nil {
		return nil, err
	}
	code, err := ReadCode(root)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		problems = append(problems, checkModuleTable(f, string(data), modules)...)
		problems = append(problems, checkCodeNames(f, string(data), code)...)
		problems = append(problems, checkLinks(root, f, string(data))...)
	}
	return problems, nil
}

// checkLinks reports the relative links of file whose target does not
// exist, or whose #fragment names no heading of the Markdown file linked
// (of file itself for a bare #fragment).
func checkLinks(root, file, text string) []string {
	var problems []string
	for _, target := range linkTarget.FindAllStringSubmatch(strings.Join(outsideFences(text), "\n"), -1) {
		t := target[1]
		if strings.Contains(t, "://") || strings.HasPrefix(t, "mailto:") {
			continue
		}
		p, fragment, _ := strings.Cut(t, "#")
		linked := file
		if p != "" {
			linked = path.Join(path.Dir(file), p)
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(linked))); err != nil {
				problems = append(problems, fmt.Sprintf("%s: the link to %s points to nothing in the repository (%s)", file, t, linked))
				continue
			}
		}
		if fragment == "" || !strings.HasSuffix(linked, ".md") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(linked)))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: the link to %s: %v", file, t, err))
			continue
		}
		if !Anchors(string(data))[fragment] {
			problems = append(problems, fmt.Sprintf("%s: the link to %s names no heading of %s", file, t, linked))
		}
	}
	return problems
}

// Anchors returns the anchors GitHub gives a Markdown text's headings:
// lower case, punctuation dropped, spaces as hyphens, "-1", "-2" after
// repeats.
func Anchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, l := range outsideFences(text) {
		t := strings.TrimLeft(l, "#")
		if len(t) == len(l) || len(l)-len(t) > 6 || !strings.HasPrefix(t, " ") {
			continue
		}
		t = linkTarget.ReplaceAllString(t, "]") // a link's text stays, its target goes
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(t)) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// checkModuleTable reports the modules file's module tables do not name,
// and first-column entries of those tables that are no module.
func checkModuleTable(file, text string, modules []string) []string {
	isModule := map[string]bool{}
	for _, m := range modules {
		isModule[m] = true
	}
	var problems []string
	listed := map[string]bool{}
	found := false
	for _, t := range Tables(text) {
		if len(t.Header.Cells) == 0 || strings.ToLower(strings.Trim(t.Header.Cells[0], "*_ ")) != "module" {
			continue
		}
		found = true
		for _, r := range t.Rows {
			for _, target := range LinkTargets(strings.Join(r.Cells, " | ")) {
				listed[cleanDir(target)] = true
			}
			if len(r.Cells) == 0 {
				continue
			}
			for _, s := range CodeSpans(r.Cells[0]) {
				d := cleanDir(s.Text)
				switch {
				case isModule[d]:
					listed[d] = true
				case strings.Contains(d, "*"):
				default:
					problems = append(problems, fmt.Sprintf("%s:%d: the module table names `%s`, which is no module (no %s/go.mod): name the module's directory", file, r.Line, s.Text, d))
				}
			}
		}
	}
	if !found {
		return append(problems, fmt.Sprintf("%s: no module table (a Markdown table whose first header cell is \"module\") listing every module", file))
	}
	for _, m := range modules {
		if !listed[m] {
			problems = append(problems, fmt.Sprintf("%s: the module table misses module %s: add a row with `%s` in its first column, or link [%s](%s) in a row", file, m, m, path.Base(m), m))
		}
	}
	return problems
}

// cleanDir makes a link target or a code span comparable with a module
// directory: no ./ before, no / after.
func cleanDir(s string) string {
	s = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "./"), "/")
	if s == "" {
		return s
	}
	return path.Clean(s)
}

var (
	// goName is an identifier, or a dotted sequence of them, behind an
	// optional package directory: what a code span naming code looks like
	// once a call's arguments are cut off.
	goName     = regexp.MustCompile(`^([A-Za-z0-9_.\-]+/)*[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\*?$`)
	identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// fileExtensions are the last parts of names like agent.go or go.work:
// files, not code.
var fileExtensions = map[string]bool{
	"go": true, "mod": true, "sum": true, "work": true, "yaml": true, "yml": true, "json": true,
	"md": true, "sh": true, "sock": true, "lock": true, "proto": true, "txt": true, "toml": true,
	"tar": true, "gz": true, "log": true, "env": true, "pb": true, "tpl": true,
}

// checkCodeNames reports the code spans of file that name code of the
// repository that does not exist (doc.go says which spans are checked).
func checkCodeNames(file, text string, code *Code) []string {
	var problems []string
	for _, s := range CodeSpans(text) {
		if why := code.Missing(s.Text); why != "" {
			problems = append(problems, fmt.Sprintf("%s:%d: `%s` names no code of the repository: %s", file, s.Line, s.Text, why))
		}
	}
	return problems
}

// Missing says what is missing when span names code of the repository
// that does not exist, and "" when it exists or is not checked.
func (c *Code) Missing(span string) string {
	name := span
	if i := strings.IndexByte(name, '('); i > 0 && strings.HasSuffix(name, ")") {
		name = name[:i] // Cache.WithClaim(uid, fn)
	}
	if !goName.MatchString(name) {
		return ""
	}
	slash := strings.LastIndexByte(name, '/')
	dot := strings.IndexByte(name[slash+1:], '.')
	if dot < 0 {
		return c.missingTest(name) // a bare name or a path: only tests are checked
	}
	if strings.Contains(name, "*") {
		return ""
	}
	dot += slash + 1
	qualifier, members := name[:dot], strings.Split(name[dot+1:], ".")
	if len(members) == 1 && fileExtensions[members[0]] {
		return ""
	}
	if slash >= 0 {
		p := c.Packages[strings.TrimPrefix(qualifier, modulePrefix)]
		if p == nil {
			return "" // another project's package, or a file
		}
		return p.missing(members)
	}
	if dirs := c.ByName[qualifier]; len(dirs) > 0 && isLower(qualifier[0]) {
		if !isExported(members[0]) {
			return "" // a configuration key (cleanup.interval), a field path
		}
		var whys []string
		for _, d := range dirs {
			why := c.Packages[d].missing(members)
			if why == "" {
				return ""
			}
			whys = append(whys, why)
		}
		return strings.Join(whys, "; ")
	}
	if ms, ok := c.Types[qualifier]; ok && isExported(qualifier) && !ms[members[0]] {
		return fmt.Sprintf("no type %s of the repository has a method or field %s", qualifier, members[0])
	}
	return ""
}

// missingTest checks a test's name (TestX, TestX* for a prefix,
// TestX/subtest); other bare names are not checked.
func (c *Code) missingTest(name string) string {
	base, _, _ := strings.Cut(name, "/")
	prefix, glob := strings.CutSuffix(base, "*")
	if !identifier.MatchString(prefix) || !isTestName(prefix) || prefix == "Test" || prefix == "Benchmark" || prefix == "Example" || prefix == "Fuzz" {
		return ""
	}
	if !glob {
		if c.Tests[prefix] {
			return ""
		}
		return "no test, benchmark, example or fuzz function of that name"
	}
	for t := range c.Tests {
		if strings.HasPrefix(t, prefix) {
			return ""
		}
	}
	return "no test, benchmark, example or fuzz function with that prefix"
}

// missing checks members (Name, or Type.Member) against the package.
func (p *Package) missing(members []string) string {
	if !p.Names[members[0]] {
		return fmt.Sprintf("package %s (%s) declares no %s", p.Name, p.Dir, members[0])
	}
	if len(members) > 1 {
		if ms, ok := p.Types[members[0]]; ok && !ms[members[1]] {
			return fmt.Sprintf("type %s.%s (%s) has no method or field %s", p.Name, members[0], p.Dir, members[1])
		}
	}
	return ""
}

func isExported(name string) bool { return name != "" && 'A' <= name[0] && name[0] <= 'Z' }
