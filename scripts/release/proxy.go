package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

// ReleaseTags returns the versions module dir has been tagged at, oldest
// first. Tags of nested modules (tools/envtest/v1.0.0 for tools) do not
// count.
func ReleaseTags(r *Repo, dir string) ([]string, error) {
	out, err := git(r.Root, "tag", "--list", dir+"/v*")
	if err != nil {
		return nil, err
	}
	var versions []string
	for _, t := range strings.Fields(out) {
		v := strings.TrimPrefix(t, dir+"/")
		if !strings.Contains(v, "/") && semver.IsValid(v) && semver.Canonical(v) == v {
			versions = append(versions, v)
		}
	}
	semver.Sort(versions)
	return versions, nil
}

// proxyDir writes a module proxy directory, served as GOPROXY=file://<dir>
// exactly as the real proxy would serve what the tags hold.
type proxyDir struct {
	dir      string
	versions map[string][]string // module path -> versions written
}

func newProxyDir(dir string) (*proxyDir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &proxyDir{dir: dir, versions: map[string][]string{}}, nil
}

// URL is the GOPROXY entry for the directory.
func (p *proxyDir) URL() string { return "file://" + filepath.ToSlash(p.dir) }

// add writes one version: .info, .mod (goMod exactly as released) and the
// zip made by zip. An unlisted version is served when asked for by name but
// is not in @v/list, so that tools asking which versions exist (gorelease)
// do not take it for a release.
func (p *proxyDir) add(m module.Version, t time.Time, goMod []byte, listed bool, zip func(io.Writer) error) error {
	escPath, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(m.Version)
	if err != nil {
		return err
	}
	base := filepath.Join(p.dir, filepath.FromSlash(escPath), "@v", escVersion)
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    string
	}{m.Version, t.UTC().Format(time.RFC3339)})
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".info", info, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(base+".mod", goMod, 0o644); err != nil {
		return err
	}
	f, err := os.Create(base + ".zip")
	if err != nil {
		return err
	}
	if err := zip(f); err != nil {
		f.Close()
		return fmt.Errorf("zip of %s: %w", m, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if listed {
		p.versions[m.Path] = append(p.versions[m.Path], m.Version)
	}
	return nil
}

// writeLists writes each module's @v/list; call it once, after every add.
func (p *proxyDir) writeLists() error {
	for path, versions := range p.versions {
		escPath, err := module.EscapePath(path)
		if err != nil {
			return err
		}
		semver.Sort(versions)
		list := strings.Join(versions, "\n") + "\n"
		if err := os.WriteFile(filepath.Join(p.dir, filepath.FromSlash(escPath), "@v", "list"), []byte(list), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// addTag adds module dir at the version its tag holds, and returns the
// go.mod it holds.
func (p *proxyDir) addTag(r *Repo, dir, version string) ([]byte, error) {
	tag := TagName(dir, version)
	goMod, err := gitBytes(r.Root, "show", tag+":"+dir+"/go.mod")
	if err != nil {
		return nil, err
	}
	out, err := git(r.Root, "log", "-1", "--format=%H %cI", tag+"^{commit}")
	if err != nil {
		return nil, err
	}
	commit, when, _ := strings.Cut(out, " ")
	t, err := time.Parse(time.RFC3339, when)
	if err != nil {
		return nil, fmt.Errorf("commit time of %s: %w", tag, err)
	}
	m := module.Version{Path: ModulePath(dir), Version: version}
	return goMod, p.add(m, t, goMod, true, func(w io.Writer) error {
		return zipCommit(w, m, r.Root, commit, dir)
	})
}

// commitZips holds the module zips made from commits by this process. The zip
// of a module at a commit never changes, and one process may write several
// proxies from the same tags (the release tool's tests: the proxy, then one
// per API check); each zip costs a git archive and a deflate of the module.
var commitZips = struct {
	sync.Mutex
	m map[string][]byte // by module@version and commit
}{m: map[string][]byte{}}

// zipCommit writes the zip of module m as directory dir holds it at commit.
func zipCommit(w io.Writer, m module.Version, root, commit, dir string) error {
	key := m.String() + " " + commit
	commitZips.Lock()
	data, ok := commitZips.m[key]
	commitZips.Unlock()
	if !ok {
		var buf bytes.Buffer
		if err := modzip.CreateFromVCS(&buf, m, root, commit, dir); err != nil {
			return err
		}
		licence, err := gitBytes(root, "show", commit+":"+licenceFile)
		if err != nil {
			licence = nil // no licence at the root: the zip has what the module has
		}
		if data, err = withLicence(buf.Bytes(), m, licence); err != nil {
			return err
		}
		commitZips.Lock()
		commitZips.m[key] = data
		commitZips.Unlock()
	}
	_, err := w.Write(data)
	return err
}

// zipWorkTree writes the zip of module m from its directory dir in the
// working tree, with the root's LICENSE as the go command adds it.
func zipWorkTree(w io.Writer, r *Repo, m module.Version, dir string) error {
	var buf bytes.Buffer
	if err := modzip.CreateFromDir(&buf, m, filepath.Join(r.Root, filepath.FromSlash(dir))); err != nil {
		return err
	}
	licence, err := os.ReadFile(filepath.Join(r.Root, licenceFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	data, err := withLicence(buf.Bytes(), m, licence)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// BuildProxy writes a proxy directory holding every release tag of every
// released module, and returns what it holds.
func BuildProxy(r *Repo, dir string) ([]module.Version, error) {
	p, err := newProxyDir(dir)
	if err != nil {
		return nil, err
	}
	var held []module.Version
	released := r.Versions.Released()
	mods := slices.Sorted(maps.Keys(released))
	for _, m := range mods {
		versions, err := ReleaseTags(r, m)
		if err != nil {
			return nil, err
		}
		for _, v := range versions {
			if _, err := p.addTag(r, m, v); err != nil {
				return nil, err
			}
			held = append(held, module.Version{Path: ModulePath(m), Version: v})
		}
	}
	return held, p.writeLists()
}

func gitBytes(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w", strings.Join(args, " "), describeExit(err))
	}
	return out, nil
}
