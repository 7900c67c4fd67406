package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
)

// pathPrefix is the module path of the repository root; a module in
// directory d has the path pathPrefix+d.
const pathPrefix = "github.com/dranode/dranode/"

// Repo is the repository as the release tool sees it: versions.yaml, the
// modules go.work uses, and every module found on disk (in the workspace or
// not: compat/*, build/*, this tool).
type Repo struct {
	Root     string
	Versions *Versions
	Work     []string           // module directories go.work uses, sorted
	Modules  map[string]*Module // by directory relative to Root
}

// Module is one go.mod of the repository.
type Module struct {
	Dir  string // relative to the repository root, slash-separated
	Path string
	File *modfile.File
}

// OpenRepo reads versions.yaml, go.work and every go.mod under root.
func OpenRepo(root string) (*Repo, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	r := &Repo{Root: root, Modules: map[string]*Module{}}
	if r.Versions, err = LoadVersions(filepath.Join(root, "versions.yaml")); err != nil {
		return nil, err
	}
	if r.Work, err = readWork(filepath.Join(root, "go.work")); err != nil {
		return nil, err
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		m, err := readModule(p)
		if err != nil {
			return err
		}
		m.Dir = filepath.ToSlash(rel)
		r.Modules[m.Dir] = m
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func readWork(file string) ([]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	w, err := modfile.ParseWork(file, data, nil)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, u := range w.Use {
		dirs = append(dirs, path.Clean(filepath.ToSlash(u.Path)))
	}
	sort.Strings(dirs)
	return dirs, nil
}

func readModule(file string) (*Module, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	f, err := modfile.Parse(file, data, nil)
	if err != nil {
		return nil, err
	}
	if f.Module == nil {
		return nil, fmt.Errorf("%s: no module directive", file)
	}
	return &Module{Path: f.Module.Mod.Path, File: f}, nil
}

// DirsSorted returns the module directories, sorted.
func (r *Repo) DirsSorted() []string { return slices.Sorted(maps.Keys(r.Modules)) }

// Sibling returns the directory of the repository module with the given
// module path, or "" if the path is not one of this repository's modules.
func (r *Repo) Sibling(modPath string) string {
	if !strings.HasPrefix(modPath, pathPrefix) {
		return ""
	}
	dir := strings.TrimPrefix(modPath, pathPrefix)
	if m, ok := r.Modules[dir]; ok && m.Path == modPath {
		return dir
	}
	return ""
}

// relDir is the replacement path module from uses for sibling to: "../x".
func relDir(from, to string) string {
	rel, err := filepath.Rel(filepath.FromSlash(from), filepath.FromSlash(to))
	if err != nil {
		panic(err) // both are clean relative paths
	}
	rel = filepath.ToSlash(rel)
	if !strings.HasPrefix(rel, "../") {
		rel = "./" + rel
	}
	return rel
}

// ModulePath is the path of the module in directory dir.
func ModulePath(dir string) string { return pathPrefix + dir }

// TagName is the tag Go looks for when module dir is fetched at version.
func TagName(dir, version string) string { return dir + "/" + version }

// git runs git in dir and returns its trimmed standard output.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
