package images_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dranode/dranode/scripts/image/images"
)

// TestAnnotationsAndSBOM: every image manifest carries the OCI annotations
// (source, revision, version, licenses), and the layout holds an SPDX
// document whose subject is the image, listing each binary with its
// SHA-256 and the modules it was built from at the versions the
// repository's go.mod files require.
func TestAnnotationsAndSBOM(t *testing.T) {
	root := repoRoot(t)
	tag, err := images.DefaultTag(root)
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range built(t) {
		t.Run(name, func(t *testing.T) {
			img, _, err := images.Image(l.Dir)
			if err != nil {
				t.Fatal(err)
			}
			m, err := img.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{
				images.AnnotationSource:   images.Source,
				images.AnnotationVersion:  tag,
				images.AnnotationLicenses: "Apache-2.0", // LICENSE at the root
				images.AnnotationRevision: testRevision,
			}
			for k, v := range want {
				if m.Annotations[k] != v || v == "" {
					t.Errorf("manifest annotation %s = %q, want %q", k, m.Annotations[k], v)
				}
			}
			for _, arch := range images.DefaultArches() {
				if _, _, err := images.SBOMFor(l.Dir, arch); err != nil {
					t.Errorf("linux/%s: %v", arch, err)
				}
			}
			if rev := images.Revision(root); len(strings.TrimSuffix(rev, "-dirty")) != 40 {
				t.Errorf("Revision(%s) = %q, want the commit", root, rev)
			}
			doc, raw, err := images.SBOM(l.Dir)
			if err != nil {
				t.Fatal(err)
			}
			if doc.SPDXVersion != "SPDX-2.3" || doc.Name != l.Ref {
				t.Errorf("SBOM %s for %s: %s", doc.SPDXVersion, doc.Name, raw[:min(len(raw), 300)])
			}
			byName := map[string]images.SPDXPackage{}
			for _, p := range doc.Packages {
				byName[p.Name+"@"+p.VersionInfo] = p
				byName[p.Name] = p
			}
			if name == images.Agent {
				plugins := builtAgentPlugins(t)
				if len(plugins) == 0 {
					t.Fatal("no plugins in the agent image")
				}
				bins := []string{"/usr/local/bin/dranode-agent", "/usr/local/bin/dranodectl"}
				for _, pl := range plugins {
					bins = append(bins, pl.Path)
				}
				for _, bin := range bins {
					p, ok := byName[bin]
					if !ok || len(p.Checksums) != 1 || len(p.Checksums[0].ChecksumValue) != 64 {
						t.Errorf("SBOM entry of %s: %+v, want its SHA-256", bin, p)
					}
				}
				for _, pl := range plugins { // every plugin the image has (gpu, loop)
					if p := byName[pl.Path]; len(p.Checksums) == 1 && p.Checksums[0].ChecksumValue != pl.SHA256 {
						t.Errorf("SBOM: %s has SHA-256 %s, the layer's file %s", pl.Path, p.Checksums[0].ChecksumValue, pl.SHA256)
					}
				}
				// A third-party module at the version agent/go.mod requires.
				mod := requiredVersion(t, filepath.Join(root, "agent", "go.mod"), "k8s.io/client-go")
				p, ok := byName["k8s.io/client-go@"+mod]
				if !ok || !slices.ContainsFunc(p.ExternalRefs, func(e images.SPDXExternalRef) bool {
					return e.ReferenceLocator == "pkg:golang/k8s.io/client-go@"+mod
				}) {
					t.Errorf("SBOM lacks k8s.io/client-go %s as a purl: %+v", mod, p)
				}
				// Each package's licence, from its module's licence file:
				// a third-party module's in the module cache, this
				// repository's LICENSE for its own modules and binaries,
				// Go's for the standard library.
				for name, want := range map[string]string{
					"k8s.io/client-go@" + mod:                "Apache-2.0",
					"github.com/dranode/dranode/agent":       "Apache-2.0",
					"/usr/local/bin/dranode-agent":           "Apache-2.0",
					"stdlib":                                 "BSD-3-Clause",
					"github.com/hashicorp/go-plugin":         "MPL-2.0",
					"go.yaml.in/yaml/v3":                     "MIT AND Apache-2.0",
					"github.com/dranode/dranode/sliceclient": "Apache-2.0",
				} {
					if got := byName[name].LicenseDeclared; got != want {
						t.Errorf("SBOM: %s licenseDeclared %q, want %q", name, got, want)
					}
				}
			}
			// A vendor's review needs every package's licence: a new
			// dependency whose licence file the scanner cannot read fails
			// here, naming it.
			for _, p := range doc.Packages {
				if p.LicenseDeclared == "" || p.LicenseDeclared == images.NoAssertion {
					t.Errorf("SBOM: %s %s has no licence (licenseDeclared %q)", p.Name, p.VersionInfo, p.LicenseDeclared)
				}
			}
		})
	}
}

// requiredVersion is the version go.mod file requires module at.
func requiredVersion(t *testing.T, file, module string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == module {
			return f[1]
		}
	}
	t.Fatalf("%s does not require %s", file, module)
	return ""
}
