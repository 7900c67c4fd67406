package main

import (
	"fmt"
	"path"
	"sort"
	"strings"
)

// Check returns every way the repository breaks the release rules, each
// naming the module, the requirement and the fix; none means it is
// releasable as versions.yaml describes.
func Check(r *Repo) []string {
	var problems []string
	problems = append(problems, checkWorkspace(r)...)
	problems = append(problems, checkAgreement(r)...)
	problems = append(problems, checkSiblings(r, nil)...)
	problems = append(problems, checkChart(r)...)
	problems = append(problems, checkLicences(r)...)
	problems = append(problems, checkNotes(r)...)
	sort.Strings(problems)
	return problems
}

// checkWorkspace: every go.work module is in exactly one module set or in
// excluded-modules, and versions.yaml names no module go.work does not use.
// Modules outside go.work (compat/*, build/*, this tool) are never released,
// so versions.yaml does not list them.
func checkWorkspace(r *Repo) []string {
	var problems []string
	inWork := map[string]bool{}
	listed := map[string]bool{}
	for _, s := range r.Versions.Sets {
		for _, m := range s.Modules {
			listed[m] = true
		}
	}
	for _, m := range r.Versions.Excluded {
		listed[m] = true
	}
	for _, m := range r.Work {
		inWork[m] = true
		if !listed[m] {
			problems = append(problems, fmt.Sprintf("versions.yaml: module %q (in go.work) is in no module set and not in excluded-modules; add it to one", m))
		}
	}
	for m := range listed {
		if !inWork[m] {
			problems = append(problems, fmt.Sprintf("versions.yaml: module %q is not used by go.work; remove it from versions.yaml or add ./%s to go.work", m, m))
		}
	}
	return problems
}

// checkAgreement: no two workspace modules require different versions of a
// third-party module. A module tested alone (GOWORK=off) must build against
// the versions the workspace selects, or "works in the workspace" says
// nothing about "works when a vendor imports it".
func checkAgreement(r *Repo) []string {
	required := map[string]map[string][]string{} // path -> version -> modules
	for _, dir := range r.Work {
		m, ok := r.Modules[dir]
		if !ok {
			continue // reported by checkWorkspace's caller: go build fails first
		}
		for _, req := range m.File.Require {
			if r.Sibling(req.Mod.Path) != "" {
				continue
			}
			if required[req.Mod.Path] == nil {
				required[req.Mod.Path] = map[string][]string{}
			}
			required[req.Mod.Path][req.Mod.Version] = append(required[req.Mod.Path][req.Mod.Version], dir)
		}
	}
	var problems []string
	for p, byVersion := range required {
		if len(byVersion) < 2 {
			continue
		}
		var parts []string
		for v, mods := range byVersion {
			parts = append(parts, fmt.Sprintf("%s by %s", v, strings.Join(mods, ", ")))
		}
		sort.Strings(parts)
		problems = append(problems, fmt.Sprintf("%s is required at different versions: %s; require one version everywhere", p, strings.Join(parts, "; ")))
	}
	return problems
}

// checkSiblings checks the sibling requirements of the given modules (all
// modules of the repository when dirs is nil):
//   - a released sibling is required at exactly its set's version, never a
//     pseudo-version: that go.mod is what users of a tagged commit resolve;
//   - every sibling requirement has a replace to the sibling's directory, so
//     development uses the working tree, not a release;
//   - a released module requires no unreleased sibling, which its users
//     could never resolve.
func checkSiblings(r *Repo, dirs []string) []string {
	released := r.Versions.Released()
	if dirs == nil {
		dirs = r.DirsSorted()
	}
	var problems []string
	for _, dir := range dirs {
		m := r.Modules[dir]
		replaced := map[string]string{}
		for _, rep := range m.File.Replace {
			replaced[rep.Old.Path] = rep.New.Path
		}
		_, isReleased := released[dir]
		for _, req := range m.File.Require {
			sib := r.Sibling(req.Mod.Path)
			if sib == "" {
				continue
			}
			want, sibReleased := released[sib]
			switch {
			case sibReleased && req.Mod.Version != want:
				problems = append(problems, fmt.Sprintf("%s/go.mod requires %s %s, but versions.yaml releases it at %s (set %q); run: make release-prepare SET=%s",
					dir, req.Mod.Path, req.Mod.Version, want, r.Versions.SetOf(sib), r.Versions.SetOf(sib)))
			case !sibReleased && isReleased:
				problems = append(problems, fmt.Sprintf("%s is released but requires %s, which is never released, so its users cannot resolve it; move the code that needs it to an unreleased module (e.g. integration) or release %s",
					dir, req.Mod.Path, sib))
			}
			rel := relDir(dir, sib)
			if got, ok := replaced[req.Mod.Path]; !ok || path.Clean(got) != path.Clean(rel) {
				problems = append(problems, fmt.Sprintf("%s/go.mod requires %s without \"replace %s => %s\"; add it so that development builds against the working tree",
					dir, req.Mod.Path, req.Mod.Path, rel))
			}
		}
	}
	return problems
}
