package main

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/licensecheck"
	"golang.org/x/mod/module"
)

// licenceFile is the file the go command reads a module's licence from. A
// module in a subdirectory without one gets the repository root's in its
// zip (cmd/go/internal/modfetch/coderepo.go), so one LICENSE at the root
// reaches every module's users; a module may have its own instead.
const licenceFile = "LICENSE"

// minLicenceCoverage is the share of a licence file's words that must be
// known licence text for it to count, the threshold pkg.go.dev applies to
// the same scanner's results: a file that is mostly something else (an
// altered licence, a notice) names no licence.
const minLicenceCoverage = 75

// ErrUnknownLicence is wrapped when a licence file is no licence the
// scanner (github.com/google/licensecheck, pkg.go.dev's) recognises.
var ErrUnknownLicence = errors.New("no recognised licence")

// DetectLicence returns the SPDX expression of the licence text: the
// identifier of each licence the text holds, joined by " AND " in the order
// they appear.
func DetectLicence(text []byte) (string, error) {
	cov := licensecheck.Scan(text)
	var ids []string
	for _, m := range cov.Match {
		if !m.IsURL && !slices.Contains(ids, m.ID) {
			ids = append(ids, m.ID)
		}
	}
	if len(ids) == 0 || cov.Percent < minLicenceCoverage {
		return "", fmt.Errorf("%w (%.0f%% of the text matches %v; %d%% needed)", ErrUnknownLicence, cov.Percent, ids, minLicenceCoverage)
	}
	return strings.Join(ids, " AND "), nil
}

// moduleLicence returns the licence file that reaches the users of module
// dir (its own, else the root's) and the licence it holds.
func moduleLicence(r *Repo, dir string) (file, id string, err error) {
	for _, f := range []string{path.Join(dir, licenceFile), licenceFile} {
		text, err := os.ReadFile(filepath.Join(r.Root, filepath.FromSlash(f)))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return f, "", err
		}
		id, err := DetectLicence(text)
		if err != nil {
			return f, "", fmt.Errorf("%s: %w", f, err)
		}
		return f, id, nil
	}
	return "", "", fmt.Errorf("neither %s/%s nor %s at the root exists", dir, licenceFile, licenceFile)
}

// licenceHeading starts the section of a module's README that names its
// licence.
const licenceHeading = "## Licence"

// checkLicences: every module of the repository (released or not, but not
// the fixtures under testdata) has a licence its users receive, and its
// README names it in a "## Licence" section; a released module has a
// README.
func checkLicences(r *Repo) []string {
	released := r.Versions.Released()
	var problems []string
	for _, dir := range r.DirsSorted() {
		if slices.Contains(strings.Split(dir, "/"), "testdata") {
			continue
		}
		file, id, err := moduleLicence(r, dir)
		if err != nil {
			problems = append(problems, fmt.Sprintf("module %s has no licence its users receive: %v; add the repository's %s at the root (or one in %s)", dir, err, licenceFile, dir))
			continue
		}
		readme, err := os.ReadFile(filepath.Join(r.Root, filepath.FromSlash(dir), "README.md"))
		if errors.Is(err, os.ErrNotExist) {
			if _, ok := released[dir]; ok {
				problems = append(problems, fmt.Sprintf("%s is released but has no README.md; write one, ending with a %q section naming %s", dir, licenceHeading, id))
			}
			continue
		}
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		section, ok := licenceSection(string(readme))
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s/README.md has no %q section; add one naming %s (from %s)", dir, licenceHeading, id, file))
		case !strings.Contains(section, id):
			problems = append(problems, fmt.Sprintf("%s/README.md's %q section does not name %s, the licence of %s", dir, licenceHeading, id, file))
		}
	}
	return problems
}

// licenceSection returns the text of doc's licenceHeading section, up to
// the next heading of its level or above.
func licenceSection(doc string) (string, bool) {
	_, rest, ok := strings.Cut("\n"+doc, "\n"+licenceHeading+"\n")
	for _, next := range []string{"\n# ", "\n## "} {
		if i := strings.Index(rest, next); i >= 0 {
			rest = rest[:i]
		}
	}
	return rest, ok
}

// withLicence returns the zip of module m with licence added as its
// LICENSE when the zip has none, as the go command makes the zip of a
// module in a subdirectory from its repository; the zips of
// golang.org/x/mod/zip leave it out. A nil licence adds nothing.
func withLicence(data []byte, m module.Version, licence []byte) ([]byte, error) {
	if licence == nil {
		return data, nil
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, err
	}
	name := m.Path + "@" + m.Version + "/" + licenceFile
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range zr.File {
		if f.Name == name {
			return data, nil
		}
		if err := zw.Copy(f); err != nil {
			return nil, err
		}
	}
	w, err := zw.Create(name)
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(w, bytes.NewReader(licence)); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
