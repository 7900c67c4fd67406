package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"
)

// Change is one requirement that Prepare rewrote.
type Change struct {
	Module   string // directory of the go.mod that changed
	Requires string // module path of the requirement
	From, To string
}

func (c Change) String() string {
	return fmt.Sprintf("%s: %s %s -> %s", c.Module, c.Requires, c.From, c.To)
}

// Prepare rewrites, in every go.mod of the repository (released or not), the
// requirements of the set's modules to the set's version, and, for the set
// holding the agent, the Helm chart's versions and its plugins'
// SHA-256 (chart.go); then each module's release notes for the set's
// version (notes.go). It returns what it changed. Running it again changes
// nothing.
func Prepare(r *Repo, setName string) ([]Change, error) {
	set, err := r.Versions.Set(setName)
	if err != nil {
		return nil, err
	}
	changes, err := prepareRequirements(r, setName, set)
	if err != nil {
		return changes, err
	}
	chart, err := prepareChart(r, setName, buildPluginSums)
	changes = append(changes, chart...)
	if err != nil {
		return changes, err
	}
	// gorelease runs only for modules whose files changed since their last
	// release; its setup (a proxy of the set, the locked module cache) is
	// made once, for the first of them.
	var differ *apiDiffer
	defer func() {
		if differ != nil {
			differ.close()
		}
	}()
	notes, err := prepareNotes(r, set, func(dir, base string) (string, error) {
		if differ == nil {
			d, err := newAPIDiffer(r, set.Modules, "")
			if err != nil {
				return "", err
			}
			differ = d
		}
		out, err := differ.report(dir, base, set.Version)
		if err != nil && !strings.Contains(out, "# summary") {
			return "", err // no report: a failure of gorelease, not a finding
		}
		return out, nil
	})
	return append(changes, notes...), err
}

// prepareRequirements requires the set's modules at its version in every
// go.mod of the repository.
func prepareRequirements(r *Repo, setName string, set ModuleSet) ([]Change, error) {
	inSet := map[string]bool{}
	for _, m := range set.Modules {
		if r.Modules[m] == nil {
			return nil, fmt.Errorf("module set %q lists %q, which has no go.mod", setName, m)
		}
		inSet[ModulePath(m)] = true
	}
	var changes []Change
	for _, dir := range r.DirsSorted() {
		m := r.Modules[dir]
		var mine []Change
		for _, req := range m.File.Require {
			if !inSet[req.Mod.Path] || req.Mod.Version == set.Version {
				continue
			}
			mine = append(mine, Change{Module: dir, Requires: req.Mod.Path, From: req.Mod.Version, To: set.Version})
		}
		if len(mine) == 0 {
			continue
		}
		for _, c := range mine {
			if err := m.File.AddRequire(c.Requires, c.To); err != nil {
				return changes, fmt.Errorf("%s/go.mod: %w", dir, err)
			}
		}
		m.File.Cleanup()
		data := modfile.Format(m.File.Syntax)
		if err := os.WriteFile(filepath.Join(r.Root, dir, "go.mod"), data, 0o644); err != nil {
			return changes, err
		}
		changes = append(changes, mine...)
	}
	return changes, nil
}
