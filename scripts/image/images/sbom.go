package images

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The SBOM of an image is an OCI artifact in the image's layout: a manifest
// with artifactType SBOMMediaType, the empty config, one blob (the SPDX
// 2.3 JSON document) and the image manifest as its subject, the form the
// OCI 1.1 referrers API lists next to the image. It is listed in the
// layout's index.json without a name, which containerd's import leaves
// unnamed. Push copies them after the image.
const (
	SBOMMediaType  = "application/spdx+json"
	emptyMediaType = "application/vnd.oci.empty.v1+json"
	// AnnotationSource and friends are the OCI pre-defined annotations
	// Build puts on each image manifest and its config's labels.
	AnnotationSource   = "org.opencontainers.image.source"
	AnnotationRevision = "org.opencontainers.image.revision"
	AnnotationVersion  = "org.opencontainers.image.version"
	AnnotationLicenses = "org.opencontainers.image.licenses"
	AnnotationCreated  = "org.opencontainers.image.created"
	// Source is the repository the images are built from.
	Source = "https://github.com/dranode/dranode"
)

// emptyJSON is the OCI empty descriptor's content.
var emptyJSON = []byte("{}")

// SPDX is the subset of an SPDX 2.3 JSON document Build writes.
type SPDX struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      SPDXCreation       `json:"creationInfo"`
	Packages          []SPDXPackage      `json:"packages"`
	Relationships     []SPDXRelationship `json:"relationships"`
}

type SPDXCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type SPDXPackage struct {
	SPDXID           string            `json:"SPDXID"`
	Name             string            `json:"name"`
	VersionInfo      string            `json:"versionInfo,omitempty"`
	DownloadLocation string            `json:"downloadLocation"`
	FilesAnalyzed    bool              `json:"filesAnalyzed"`
	Checksums        []SPDXChecksum    `json:"checksums,omitempty"`
	ExternalRefs     []SPDXExternalRef `json:"externalRefs,omitempty"`
	// LicenseDeclared is the licence the package's authors declare in its
	// licence file, as the scanner reads it; LicenseConcluded is left to
	// the reader (NOASSERTION).
	LicenseConcluded string `json:"licenseConcluded,omitempty"`
	LicenseDeclared  string `json:"licenseDeclared,omitempty"`
	Comment          string `json:"comment,omitempty"`
}

type SPDXChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type SPDXExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type SPDXRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// sbom builds the SPDX document of one image from the build information
// Go embeds in each of its binaries (debug/buildinfo): per binary a package
// (its path in the image, SHA-256, main module, Go version) that CONTAINS a
// package per module it was built from, as a purl, at the version and with
// the go.sum hash the build used. Modules replaced by a directory (the
// repository's own) have no version: their versionInfo is "(devel)". Each
// package's licenseDeclared is its module's licence (licences), a
// binary's that of its main module.
func sbom(imageName, ref string, binaries []binary, built map[binary]string, created time.Time, lic *licences) ([]byte, error) {
	doc := SPDX{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name: ref,
		// A namespace unique to the content: the same binaries give the
		// same document, byte for byte.
		CreationInfo: SPDXCreation{Created: created.UTC().Format(time.RFC3339), Creators: []string{"Tool: dranode scripts/image"}},
	}
	modules := map[string]int{} // "path@version" -> index in doc.Packages
	h := sha256.New()
	for _, b := range binaries {
		file := built[b]
		info, err := buildinfo.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("build info of %s: %w", b.path, err)
		}
		sum, err := fileSHA256(file)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(h, "%s %s\n", b.path, sum)
		id := spdxID("File", b.path)
		deps := append([]*debugModule{{Path: "stdlib", Version: info.GoVersion}}, toModules(info)...)
		doc.Packages = append(doc.Packages, SPDXPackage{
			SPDXID: id, Name: b.path, VersionInfo: info.Main.Version, DownloadLocation: NoAssertion,
			Checksums:        []SPDXChecksum{{Algorithm: "SHA256", ChecksumValue: sum}},
			LicenseConcluded: NoAssertion, LicenseDeclared: lic.of(deps[1]),
			Comment: fmt.Sprintf("Go binary, package %s, main module %s, built with %s", info.Path, info.Main.Path, info.GoVersion),
		})
		doc.Relationships = append(doc.Relationships, SPDXRelationship{Element: "SPDXRef-DOCUMENT", Type: "DESCRIBES", Related: id})
		for _, m := range deps {
			key := m.Path + "@" + m.Version
			i, ok := modules[key]
			if !ok {
				i = len(doc.Packages)
				modules[key] = i
				p := SPDXPackage{SPDXID: spdxID("Module", key), Name: m.Path, VersionInfo: m.Version, DownloadLocation: NoAssertion,
					LicenseConcluded: NoAssertion, LicenseDeclared: lic.of(m)}
				if m.Version != "(devel)" {
					p.ExternalRefs = []SPDXExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: "pkg:golang/" + m.Path + "@" + m.Version}}
				}
				if m.Sum != "" {
					p.Comment = "go.sum " + m.Sum
				}
				doc.Packages = append(doc.Packages, p)
			}
			doc.Relationships = append(doc.Relationships, SPDXRelationship{Element: id, Type: "CONTAINS", Related: doc.Packages[i].SPDXID})
		}
	}
	doc.DocumentNamespace = "https://github.com/dranode/dranode/spdx/" + imageName + "/" + hex.EncodeToString(h.Sum(nil))
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// debugModule is a module a binary was built from: Path as required,
// Version and Sum as built.
type debugModule struct {
	Path, Version, Sum string
	// Replacement is the module path the build fetched instead of Path
	// (a replace by another module), "" when none.
	Replacement string
}

// fetched is the module path the build fetched.
func (m *debugModule) fetched() string {
	if m.Replacement != "" {
		return m.Replacement
	}
	return m.Path
}

// toModules lists the main module and the dependencies, each as built (a
// replacement's version when replaced), sorted.
func toModules(info *buildinfo.BuildInfo) []*debugModule {
	out := []*debugModule{{Path: info.Main.Path, Version: orDevel(info.Main.Version), Sum: info.Main.Sum}}
	for _, d := range info.Deps {
		m := &debugModule{Path: d.Path, Version: orDevel(d.Version), Sum: d.Sum}
		if r := d.Replace; r != nil {
			m.Version, m.Sum = orDevel(r.Version), r.Sum
			if r.Version != "" {
				m.Replacement = r.Path
			}
		}
		out = append(out, m)
	}
	sort.Slice(out[1:], func(i, j int) bool { return out[1+i].Path < out[1+j].Path })
	return out
}

func orDevel(v string) string {
	if v == "" {
		return "(devel)"
	}
	return v
}

// spdxID makes an SPDX identifier ([A-Za-z0-9.-]+) from kind and s.
func spdxID(kind, s string) string {
	var b strings.Builder
	b.WriteString("SPDXRef-" + kind + "-")
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}

func fileSHA256(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// appendSBOM writes doc as the SBOM artifact of the image subject into the
// layout p.
func appendSBOM(p layout.Path, subject v1.Descriptor, doc []byte) error {
	write := func(data []byte) (v1.Hash, error) {
		hash, _, err := v1.SHA256(bytes.NewReader(data))
		if err != nil {
			return v1.Hash{}, err
		}
		return hash, p.WriteBlob(hash, io.NopCloser(bytes.NewReader(data)))
	}
	emptyHash, err := write(emptyJSON)
	if err != nil {
		return err
	}
	docHash, err := write(doc)
	if err != nil {
		return err
	}
	sub := v1.Descriptor{MediaType: subject.MediaType, Size: subject.Size, Digest: subject.Digest}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  SBOMMediaType,
		Config:        v1.Descriptor{MediaType: emptyMediaType, Size: int64(len(emptyJSON)), Digest: emptyHash},
		Layers: []v1.Descriptor{{MediaType: SBOMMediaType, Size: int64(len(doc)), Digest: docHash,
			Annotations: map[string]string{"org.opencontainers.image.title": "sbom.spdx.json"}}},
		Subject: &sub,
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	mHash, err := write(raw)
	if err != nil {
		return err
	}
	return p.AppendDescriptor(v1.Descriptor{MediaType: types.OCIManifestSchema1, ArtifactType: SBOMMediaType, Size: int64(len(raw)), Digest: mHash})
}

// SBOM returns the SPDX document attached to the image of the layout dir
// for this machine's architecture.
func SBOM(dir string) (*SPDX, []byte, error) {
	return SBOMFor(dir, runtime.GOARCH)
}

// SBOMFor returns the SPDX document attached to the linux/arch image.
func SBOMFor(dir, arch string) (*SPDX, []byte, error) {
	_, desc, err := ImageFor(dir, arch)
	if err != nil {
		return nil, nil, err
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, nil, err
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, nil, err
	}
	for _, d := range im.Manifests {
		if d.ArtifactType != SBOMMediaType {
			continue
		}
		raw, err := p.Bytes(d.Digest)
		if err != nil {
			return nil, nil, err
		}
		var m v1.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, nil, fmt.Errorf("%s: SBOM manifest: %w", dir, err)
		}
		if m.Subject == nil || m.Subject.Digest != desc.Digest || len(m.Layers) != 1 {
			continue
		}
		data, err := p.Bytes(m.Layers[0].Digest)
		if err != nil {
			return nil, nil, err
		}
		var doc SPDX
		if err := json.Unmarshal(data, &doc); err != nil {
			return nil, nil, fmt.Errorf("%s: SBOM: %w", dir, err)
		}
		return &doc, data, nil
	}
	return nil, nil, fmt.Errorf("%s: no SBOM for image %s", dir, desc.Digest)
}

// imageBinaries lists the binaries of spec in layer order.
func imageBinaries(spec imageSpec) []binary {
	var out []binary
	for _, l := range spec.layers {
		out = append(out, l.binaries...)
	}
	sort.SliceStable(out, func(i, j int) bool { return path.Clean(out[i].path) < path.Clean(out[j].path) })
	return out
}
