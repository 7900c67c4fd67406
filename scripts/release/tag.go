package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

var (
	// ErrDirtyTree is returned by Tag when the working tree has changes: a
	// tag must name exactly what was checked.
	ErrDirtyTree = errors.New("the working tree is not clean; commit first")
	// ErrTagExists is returned by Tag when a release tag already exists:
	// a published version never changes.
	ErrTagExists = errors.New("tag already exists")
	// ErrNotPrepared is returned by Tag when a module of the set requires a
	// sibling at a version other than versions.yaml's.
	ErrNotPrepared = errors.New("module set is not ready to tag")
)

// Tag creates the annotated tags <dir>/<version> for every module of the set
// at HEAD, siblings first, and returns them in the order created. Nothing is
// pushed.
func Tag(r *Repo, setName string) ([]string, error) {
	set, err := r.Versions.Set(setName)
	if err != nil {
		return nil, err
	}
	if err := checkReleaseVersion(set.Version); err != nil {
		return nil, fmt.Errorf("module set %q: %w", setName, err)
	}
	status, err := git(r.Root, "status", "--porcelain")
	if err != nil {
		return nil, err
	}
	if status != "" {
		return nil, fmt.Errorf("%w:\n%s", ErrDirtyTree, status)
	}
	for _, m := range set.Modules {
		if r.Modules[m] == nil {
			return nil, fmt.Errorf("module set %q lists %q, which has no go.mod", setName, m)
		}
		if exists, err := tagExists(r.Root, TagName(m, set.Version)); err != nil {
			return nil, err
		} else if exists {
			return nil, fmt.Errorf("%w: %s; bump the set's version in versions.yaml", ErrTagExists, TagName(m, set.Version))
		}
	}
	if problems := checkSiblings(r, set.Modules); len(problems) > 0 {
		return nil, fmt.Errorf("%w:\n%s", ErrNotPrepared, strings.Join(problems, "\n"))
	}
	// A sibling from another set must already be released at the version
	// required, or the tagged go.mod names a version nobody can fetch.
	released := r.Versions.Released()
	for _, m := range set.Modules {
		for _, req := range r.Modules[m].File.Require {
			sib := r.Sibling(req.Mod.Path)
			if sib == "" || r.Versions.SetOf(sib) == setName {
				continue
			}
			if exists, err := tagExists(r.Root, TagName(sib, released[sib])); err != nil {
				return nil, err
			} else if !exists {
				return nil, fmt.Errorf("%s requires %s %s, which is not tagged yet; tag set %q first", m, req.Mod.Path, req.Mod.Version, r.Versions.SetOf(sib))
			}
		}
	}
	order, err := dependencyOrder(r, set.Modules)
	if err != nil {
		return nil, err
	}
	var tags []string
	for _, m := range order {
		name := TagName(m, set.Version)
		if _, err := git(r.Root, "tag", "-a", name, "-m", m+" "+set.Version); err != nil {
			return tags, err
		}
		tags = append(tags, name)
	}
	return tags, nil
}

func tagExists(root, name string) (bool, error) {
	out, err := git(root, "tag", "--list", name)
	return out != "", err
}

// dependencyOrder sorts modules so that each comes after the siblings it
// requires (among modules), alphabetically where the graph leaves a choice.
func dependencyOrder(r *Repo, modules []string) ([]string, error) {
	in := map[string]bool{}
	for _, m := range modules {
		in[m] = true
	}
	sorted := append([]string(nil), modules...)
	sort.Strings(sorted)
	const (
		visiting = 1
		done     = 2
	)
	state := map[string]int{}
	var order []string
	var visit func(m string, path []string) error
	visit = func(m string, path []string) error {
		switch state[m] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("modules require each other in a cycle: %s", strings.Join(append(path, m), " -> "))
		}
		state[m] = visiting
		var deps []string
		for _, req := range r.Modules[m].File.Require {
			if sib := r.Sibling(req.Mod.Path); in[sib] {
				deps = append(deps, sib)
			}
		}
		sort.Strings(deps)
		for _, d := range deps {
			if err := visit(d, append(path, m)); err != nil {
				return err
			}
		}
		state[m] = done
		order = append(order, m)
		return nil
	}
	for _, m := range sorted {
		if err := visit(m, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}
