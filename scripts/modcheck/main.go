// Command modcheck checks the invariants that hold the multi-module
// repository together:
//
//   - every module in go.work has a version in versions.yaml, and
//     versions.yaml names no module that go.work does not use;
//   - every version in versions.yaml is a valid semantic version (vX.Y.Z);
//   - no two workspace modules require different versions of the same
//     dependency. A module tested alone (GOWORK=off) must build against the
//     same versions that the workspace selects, or "works in the workspace"
//     says nothing about "works when a vendor imports it".
//
// It is run from the repository root by "make check" and uses the standard
// library only, so it needs no module of its own.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

const ownPrefix = "github.com/dranode/dranode/"

var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

func main() {
	var problems []string
	modules, err := workspaceModules()
	if err != nil {
		fail(err)
	}
	versions, err := readVersions("versions.yaml")
	if err != nil {
		fail(err)
	}
	problems = append(problems, checkVersions(modules, versions)...)
	deps, err := checkDependencies(modules)
	if err != nil {
		fail(err)
	}
	problems = append(problems, deps...)
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "modcheck:", p)
		}
		os.Exit(1)
	}
	fmt.Printf("modcheck: %d modules agree on versions and dependencies\n", len(modules))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "modcheck:", err)
	os.Exit(2)
}

// workspaceModules returns the directories that go.work uses, without "./".
func workspaceModules() ([]string, error) {
	out, err := exec.Command("go", "work", "edit", "-json", "go.work").Output()
	if err != nil {
		return nil, fmt.Errorf("reading go.work: %w", describeExit(err))
	}
	var work struct {
		Use []struct{ DiskPath string }
	}
	if err := json.Unmarshal(out, &work); err != nil {
		return nil, fmt.Errorf("decoding go work edit -json: %w", err)
	}
	var dirs []string
	for _, u := range work.Use {
		dirs = append(dirs, filepath.Clean(u.DiskPath))
	}
	sort.Strings(dirs)
	return dirs, nil
}

// readVersions reads the "modules:" map of versions.yaml. The file is kept
// to a flat subset of YAML (one "  name: version" line per module) so that it
// can be read without a YAML library.
func readVersions(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	versions := map[string]string{}
	inModules := false
	scanner := bufio.NewScanner(f)
	for n := 1; scanner.Scan(); n++ {
		line := scanner.Text()
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		if !strings.HasPrefix(line, " ") {
			inModules = strings.TrimSpace(line) == "modules:"
			continue
		}
		if !inModules {
			continue
		}
		name, version, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want \"module: version\", got %q", path, n, line)
		}
		name, version = strings.TrimSpace(name), strings.Trim(strings.TrimSpace(version), `"'`)
		if _, dup := versions[name]; dup {
			return nil, fmt.Errorf("%s:%d: module %q listed twice", path, n, name)
		}
		versions[name] = version
	}
	return versions, scanner.Err()
}

func checkVersions(modules []string, versions map[string]string) []string {
	var problems []string
	inWork := map[string]bool{}
	for _, m := range modules {
		inWork[m] = true
		v, ok := versions[m]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("versions.yaml: module %q (in go.work) has no version", m))
		case !semver.MatchString(v):
			problems = append(problems, fmt.Sprintf("versions.yaml: module %q: version %q is not vMAJOR.MINOR.PATCH", m, v))
		}
	}
	for m := range versions {
		if !inWork[m] {
			problems = append(problems, fmt.Sprintf("versions.yaml: module %q is not used by go.work", m))
		}
	}
	sort.Strings(problems)
	return problems
}

func checkDependencies(modules []string) ([]string, error) {
	// dependency path -> version -> modules that require it
	required := map[string]map[string][]string{}
	for _, m := range modules {
		cmd := exec.Command("go", "mod", "edit", "-json")
		cmd.Dir = m
		cmd.Env = append(os.Environ(), "GOWORK=off")
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("reading %s/go.mod: %w", m, describeExit(err))
		}
		var mod struct {
			Require []struct{ Path, Version string }
		}
		if err := json.Unmarshal(out, &mod); err != nil {
			return nil, fmt.Errorf("decoding %s/go.mod: %w", m, err)
		}
		for _, r := range mod.Require {
			if strings.HasPrefix(r.Path, ownPrefix) {
				continue // siblings are replaced by relative paths
			}
			if required[r.Path] == nil {
				required[r.Path] = map[string][]string{}
			}
			required[r.Path][r.Version] = append(required[r.Path][r.Version], m)
		}
	}
	var problems []string
	for path, byVersion := range required {
		if len(byVersion) < 2 {
			continue
		}
		var parts []string
		for v, mods := range byVersion {
			parts = append(parts, fmt.Sprintf("%s by %s", v, strings.Join(mods, ", ")))
		}
		sort.Strings(parts)
		problems = append(problems, fmt.Sprintf("%s is required at different versions: %s", path, strings.Join(parts, "; ")))
	}
	sort.Strings(problems)
	return problems, nil
}

func describeExit(err error) error {
	var exit *exec.ExitError
	if errors.As(err, &exit) && len(exit.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(exit.Stderr)))
	}
	return err
}
