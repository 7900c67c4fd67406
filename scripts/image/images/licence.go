package images

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/google/licensecheck"
	"golang.org/x/mod/module"
)

// NoAssertion is the SPDX value for a licence nobody determined.
const NoAssertion = "NOASSERTION"

// minLicenceCoverage is the share of a licence file's words that must be
// known licence text for it to name a licence: pkg.go.dev's threshold for
// the same scanner (github.com/google/licensecheck).
const minLicenceCoverage = 75

// licenceFiles are the names a module's licence file has, in the order
// they are tried, at the module's root.
var licenceFiles = []string{"LICENSE", "LICENSE.md", "LICENSE.txt", "LICENCE", "COPYING", "COPYING.md"}

// detectLicence returns the SPDX expression of the licence file in dir:
// each licence the scanner finds, joined by " AND " in the order they
// appear, or NoAssertion when there is no file or it is mostly something
// else.
func detectLicence(dir string) string {
	for _, name := range licenceFiles {
		text, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		cov := licensecheck.Scan(text)
		var ids []string
		for _, m := range cov.Match {
			if !m.IsURL && !slices.Contains(ids, m.ID) {
				ids = append(ids, m.ID)
			}
		}
		if len(ids) == 0 || cov.Percent < minLicenceCoverage {
			return NoAssertion
		}
		return strings.Join(ids, " AND ")
	}
	return NoAssertion
}

// RepositoryLicence is the licence of the repository at root (its
// LICENSE), the images' org.opencontainers.image.licenses: NoAssertion
// without one.
func RepositoryLicence(root string) string { return detectLicence(root) }

// ownModulePrefix is the module path prefix of this repository's modules.
const ownModulePrefix = "github.com/dranode/dranode/"

// licences finds the licence of each module a binary was built from, from
// the files the build read: a third-party module's in the module cache, a
// module of this repository in its directory (or the root's LICENSE, which
// the go command puts in a module's zip when the module has none), the
// standard library's in GOROOT. Safe for concurrent use; each directory
// is scanned once.
type licences struct {
	root, modCache, goroot string

	mu    sync.Mutex
	cache map[string]string // by directory
}

// newLicences asks the go command that builds the binaries where its
// module cache and GOROOT are.
func newLicences(ctx context.Context, o Options) (*licences, error) {
	out, err := exec.CommandContext(ctx, o.Go, "env", "GOMODCACHE", "GOROOT").Output()
	if err != nil {
		return nil, fmt.Errorf("%s env GOMODCACHE GOROOT: %w", o.Go, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		return nil, fmt.Errorf("%s env GOMODCACHE GOROOT printed %q", o.Go, out)
	}
	return &licences{root: o.Root, modCache: lines[0], goroot: lines[1], cache: map[string]string{}}, nil
}

// of returns the licence of module m as built.
func (l *licences) of(m *debugModule) string {
	var dirs []string
	switch {
	case m.Path == "stdlib":
		dirs = []string{l.goroot}
	case strings.HasPrefix(m.Path, ownModulePrefix) && m.Version == "(devel)":
		dirs = []string{filepath.Join(l.root, filepath.FromSlash(strings.TrimPrefix(m.Path, ownModulePrefix))), l.root}
	default:
		p, errP := module.EscapePath(m.fetched())
		v, errV := module.EscapeVersion(m.Version)
		if err := errors.Join(errP, errV); err != nil {
			return NoAssertion
		}
		dirs = []string{filepath.Join(l.modCache, filepath.FromSlash(p)+"@"+v)}
	}
	for _, d := range dirs {
		if id := l.dir(d); id != "" {
			return id
		}
	}
	return NoAssertion
}

// dir returns the licence of the licence file in d, "" when d has none.
func (l *licences) dir(d string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id, ok := l.cache[d]; ok {
		return id
	}
	id := ""
	for _, name := range licenceFiles {
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			id = detectLicence(d)
			break
		}
	}
	l.cache[d] = id
	return id
}
