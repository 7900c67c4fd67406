package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/mod/semver"
)

// Versions is versions.yaml: the module sets, each released at one version,
// and the workspace modules that are never released.
type Versions struct {
	Sets     map[string]ModuleSet `yaml:"module-sets"`
	Excluded []string             `yaml:"excluded-modules"`
}

// ModuleSet is a group of modules that are always released together, at one
// version, so that a vendor never has to work out which versions of two
// siblings go together.
type ModuleSet struct {
	Version string   `yaml:"version"`
	Modules []string `yaml:"modules"`
}

// ErrUnknownSet is returned for a module set that versions.yaml does not
// define.
var ErrUnknownSet = errors.New("unknown module set")

// LoadVersions reads and validates versions.yaml. Unknown keys are errors:
// a misspelt "exclude-modules" must not silently release nothing.
func LoadVersions(path string) (*Versions, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v, err := ParseVersions(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// ParseVersions decodes and validates the content of versions.yaml.
func ParseVersions(data []byte) (*Versions, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var v Versions
	if err := dec.Decode(&v); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if err := v.validate(); err != nil {
		return nil, err
	}
	return &v, nil
}

func (v *Versions) validate() error {
	var problems []string
	seen := map[string]string{} // module dir -> where it is listed
	note := func(dir, where string) {
		if dir == "" || strings.HasPrefix(dir, "/") || strings.HasPrefix(dir, ".") || strings.HasSuffix(dir, "/") {
			problems = append(problems, fmt.Sprintf("%s: %q is not a module directory relative to the repository root (e.g. \"cdi\", \"tools/envtest\")", where, dir))
			return
		}
		if prev, ok := seen[dir]; ok {
			problems = append(problems, fmt.Sprintf("module %q is listed twice: in %s and in %s; a module belongs to one set or is excluded", dir, prev, where))
			return
		}
		seen[dir] = where
	}
	for _, name := range v.SetNames() {
		s := v.Sets[name]
		where := fmt.Sprintf("module set %q", name)
		if err := checkReleaseVersion(s.Version); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", where, err))
		}
		if len(s.Modules) == 0 {
			problems = append(problems, fmt.Sprintf("%s has no modules", where))
		}
		for _, m := range s.Modules {
			note(m, where)
		}
	}
	for _, m := range v.Excluded {
		note(m, "excluded-modules")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// checkReleaseVersion accepts what can be tagged for a module whose path has
// no major version suffix: a canonical vMAJOR.MINOR.PATCH[-pre] with a major
// of v0 or v1 (v2 and later need a "/v2" module path).
func checkReleaseVersion(v string) error {
	if !semver.IsValid(v) || semver.Canonical(v) != v || semver.Build(v) != "" {
		return fmt.Errorf("version %q is not a semantic version vMAJOR.MINOR.PATCH", v)
	}
	if m := semver.Major(v); m != "v0" && m != "v1" {
		return fmt.Errorf("version %q needs a /%s suffix on every module path of the set; the modules have none", v, m)
	}
	return nil
}

// SetNames returns the names of the module sets, sorted.
func (v *Versions) SetNames() []string {
	return slices.Sorted(maps.Keys(v.Sets))
}

// Set returns the named module set.
func (v *Versions) Set(name string) (ModuleSet, error) {
	s, ok := v.Sets[name]
	if !ok {
		return ModuleSet{}, fmt.Errorf("%w %q: versions.yaml defines %s", ErrUnknownSet, name, strings.Join(v.SetNames(), ", "))
	}
	return s, nil
}

// Released maps every released module directory to its set's version.
func (v *Versions) Released() map[string]string {
	r := map[string]string{}
	for _, s := range v.Sets {
		for _, m := range s.Modules {
			r[m] = s.Version
		}
	}
	return r
}

// SetOf returns the name of the set that releases module dir, or "".
func (v *Versions) SetOf(dir string) string {
	for name, s := range v.Sets {
		for _, m := range s.Modules {
			if m == dir {
				return name
			}
		}
	}
	return ""
}
