package images

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// ErrNotSingleImage is wrapped when a layout does not hold exactly one
// image index (or image) besides the artifacts attached to it, the form
// [Build] writes, or the index has no image for the architecture asked.
var ErrNotSingleImage = errors.New("layout does not hold exactly one image")

// top returns the layout's one entry that is no artifact (the image index
// Build writes, or an image), with the layout's index.
func top(dir string) (v1.ImageIndex, v1.Descriptor, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("%s: %w", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("%s: index.json: %w", dir, err)
	}
	// Artifacts attached to the images (their SBOMs) are manifests too.
	var found []v1.Descriptor
	for _, d := range m.Manifests {
		if d.ArtifactType == "" {
			found = append(found, d)
		}
	}
	if len(found) != 1 || !(found[0].MediaType.IsImage() || found[0].MediaType.IsIndex()) {
		return nil, v1.Descriptor{}, fmt.Errorf("%s: %w (%d manifests)", dir, ErrNotSingleImage, len(found))
	}
	return idx, found[0], nil
}

// Image returns the image for this machine's architecture in the OCI image
// layout dir and its descriptor (in the image index, with its platform).
func Image(dir string) (v1.Image, v1.Descriptor, error) {
	return ImageFor(dir, runtime.GOARCH)
}

// ImageFor returns the linux/arch image of the layout dir.
func ImageFor(dir, arch string) (v1.Image, v1.Descriptor, error) {
	idx, desc, err := top(dir)
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	if desc.MediaType.IsImage() {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return nil, v1.Descriptor{}, fmt.Errorf("%s: %w", dir, err)
		}
		return img, desc, nil
	}
	child, err := idx.ImageIndex(desc.Digest)
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("%s: %w", dir, err)
	}
	cm, err := child.IndexManifest()
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("%s: %w", dir, err)
	}
	var have []string
	for _, d := range cm.Manifests {
		if d.Platform == nil {
			continue
		}
		have = append(have, d.Platform.OS+"/"+d.Platform.Architecture)
		if d.Platform.OS == "linux" && d.Platform.Architecture == arch {
			img, err := child.Image(d.Digest)
			if err != nil {
				return nil, v1.Descriptor{}, fmt.Errorf("%s: %w", dir, err)
			}
			return img, d, nil
		}
	}
	return nil, v1.Descriptor{}, fmt.Errorf("%s: %w for linux/%s (it has %s)", dir, ErrNotSingleImage, arch, strings.Join(have, ", "))
}

// ReadLayout describes the image index of the OCI image layout dir. Name
// is the last path element of the repository in its reference.
func ReadLayout(dir string) (Layout, error) {
	idx, desc, err := top(dir)
	if err != nil {
		return Layout{}, err
	}
	l := Layout{Dir: dir, Ref: desc.Annotations[AnnotationImageName], Digest: desc.Digest.String(), Size: desc.Size}
	if l.Ref != "" {
		if t, err := name.NewTag(l.Ref); err == nil {
			l.Name = path.Base(t.RepositoryStr())
		}
	}
	images := []v1.Image{}
	if desc.MediaType.IsImage() {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return Layout{}, fmt.Errorf("%s: %w", dir, err)
		}
		images = append(images, img)
	} else {
		child, err := idx.ImageIndex(desc.Digest)
		if err != nil {
			return Layout{}, fmt.Errorf("%s: %w", dir, err)
		}
		cm, err := child.IndexManifest()
		if err != nil {
			return Layout{}, fmt.Errorf("%s: %w", dir, err)
		}
		for _, d := range cm.Manifests {
			img, err := child.Image(d.Digest)
			if err != nil {
				return Layout{}, fmt.Errorf("%s: %w", dir, err)
			}
			l.Size += d.Size
			images = append(images, img)
		}
	}
	for _, img := range images {
		m, err := img.Manifest()
		if err != nil {
			return Layout{}, fmt.Errorf("%s: %w", dir, err)
		}
		l.Size += m.Config.Size
		for _, ld := range m.Layers {
			l.Size += ld.Size
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return Layout{}, fmt.Errorf("%s: %w", dir, err)
		}
		l.Platforms = append(l.Platforms, cf.OS+"/"+cf.Architecture)
	}
	return l, nil
}

// Archive writes the OCI image layout dir as a tar stream (an "OCI
// archive": oci-layout, index.json and blobs/ at the top), the form "ctr
// images import" and "docker load" read. Entries are sorted and dated the
// Unix epoch, so the same layout gives the same bytes.
func Archive(dir string, w io.Writer) error {
	if _, _, err := Image(dir); err != nil {
		return err
	}
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file or directory", p)
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		return err
	}
	// The metadata first: a reader streaming the tar learns the format
	// before the blobs.
	rank := func(rel string) int {
		switch rel {
		case "oci-layout":
			return 0
		case "index.json":
			return 1
		}
		return 2
	}
	rels := make([]string, len(files))
	for i, f := range files {
		rel, _ := filepath.Rel(dir, f)
		rels[i] = filepath.ToSlash(rel)
	}
	sort.Slice(rels, func(i, j int) bool {
		if a, b := rank(rels[i]), rank(rels[j]); a != b {
			return a < b
		}
		return rels[i] < rels[j]
	})
	tw := tar.NewWriter(w)
	for _, rel := range rels {
		full := filepath.Join(dir, filepath.FromSlash(rel))
		fi, err := os.Stat(full)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: rel, Mode: 0o644, ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Size: fi.Size(), Format: tar.FormatPAX}
		if fi.IsDir() {
			hdr.Name, hdr.Mode, hdr.Typeflag, hdr.Size = rel+"/", 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.IsDir() {
			continue
		}
		f, err := os.Open(full)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", full, err)
		}
	}
	return tw.Close()
}

// ArchiveFile writes [Archive] of dir to file, replacing it only when the
// whole archive is written.
func ArchiveFile(dir, file string) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := Archive(dir, tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

// Push copies the image of the OCI image layout dir to the registry
// reference ref (e.g. registry.example.com/dranode/dranode-agent:v0.1.0),
// then its SBOMs (pushSBOMs), and returns the image's digest, which does
// not change on the way. Credentials come
// from the default keychain (the Docker config file: $DOCKER_CONFIG, else
// ~/.docker/config.json, and its credential helpers), as "docker login"
// or "crane auth login" leave them; opts come after those and override
// them. Registries on loopback and private addresses are spoken to over
// plain HTTP (the go-containerregistry rule).
func Push(ctx context.Context, dir, ref string, opts ...remote.Option) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("push: reference %q: %w", ref, err)
	}
	idx, desc, err := top(dir)
	if err != nil {
		return "", err
	}
	all := append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	if desc.MediaType.IsIndex() {
		child, err := idx.ImageIndex(desc.Digest)
		if err != nil {
			return "", err
		}
		err = remote.WriteIndex(r, child, all...)
	} else {
		var img v1.Image
		if img, err = idx.Image(desc.Digest); err == nil {
			err = remote.Write(r, img, all...)
		}
	}
	if err != nil {
		return "", fmt.Errorf("push %s: %w", r, err)
	}
	if err := pushSBOMs(idx, r, all); err != nil {
		return "", err
	}
	return desc.Digest.String(), nil
}

// pushSBOMs copies the layout's SBOMs, each an artifact whose subject is
// one of the images just pushed, to the repository of r by digest. A
// registry with the OCI 1.1 referrers API lists each under its image; for
// one without, go-containerregistry keeps the referrers tag schema's index
// (tag sha256-<image digest>) up to date, where OCI clients look next.
func pushSBOMs(idx v1.ImageIndex, r name.Reference, opts []remote.Option) error {
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range m.Manifests {
		if d.ArtifactType != SBOMMediaType {
			continue
		}
		sbom, err := idx.Image(d.Digest)
		if err != nil {
			return fmt.Errorf("SBOM %s: %w", d.Digest, err)
		}
		at := r.Context().Digest(d.Digest.String())
		if err := remote.Write(at, sbom, opts...); err != nil {
			return fmt.Errorf("push SBOM %s: %w", at, err)
		}
	}
	return nil
}

// Plugin is one driver plugin binary inside an image.
type Plugin struct {
	// Name is the file name without a "-plugin" suffix: the name the Helm
	// chart's drivers[] entry for it has ("gpu" for gpu-plugin).
	Name string
	// Path is the absolute path in the image.
	Path string
	// SHA256 is the hex SHA-256 of the binary, the value of the agent's
	// plugins.drivers[].sha256 and the chart's drivers[].sha256.
	SHA256 string
}

// PluginDigests returns the driver plugins under [PluginDir] in the image of
// the OCI image layout dir, sorted by path, read from its layers as a
// container would see them (a later layer's file replaces an earlier one's).
func PluginDigests(dir string) ([]Plugin, error) {
	return PluginDigestsFor(dir, runtime.GOARCH)
}

// PluginDigestsFor is [PluginDigests] of the linux/arch image.
func PluginDigestsFor(dir, arch string) ([]Plugin, error) {
	img, _, err := ImageFor(dir, arch)
	if err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	prefix := strings.TrimPrefix(PluginDir, "/") + "/"
	found := map[string]Plugin{}
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, fmt.Errorf("%s: layer %d: %w", dir, i, err)
		}
		err = func() error {
			defer rc.Close()
			tr := tar.NewReader(rc)
			for {
				hdr, err := tr.Next()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				p := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
				dirPart, base := path.Split(p)
				if dirPart != prefix {
					continue
				}
				if strings.HasPrefix(base, ".wh.") {
					delete(found, strings.TrimPrefix(base, ".wh."))
					continue
				}
				if hdr.Typeflag != tar.TypeReg {
					continue
				}
				h := sha256.New()
				if _, err := io.Copy(h, tr); err != nil {
					return err
				}
				found[base] = Plugin{Name: strings.TrimSuffix(base, "-plugin"), Path: "/" + p, SHA256: hex.EncodeToString(h.Sum(nil))}
			}
		}()
		if err != nil {
			return nil, fmt.Errorf("%s: layer %d: %w", dir, i, err)
		}
	}
	plugins := make([]Plugin, 0, len(found))
	for _, p := range found {
		plugins = append(plugins, p)
	}
	sort.Slice(plugins, func(i, j int) bool { return plugins[i].Path < plugins[j].Path })
	return plugins, nil
}

// WriteChartValues writes plugins in the Helm chart's values form: the
// drivers map of examples/deploy/chart/dranode/values.yaml with the path
// and sha256 of each plugin, a values file that Helm merges with the
// chart's own (helm install -f).
func WriteChartValues(w io.Writer, ref string, plugins []Plugin) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# SHA-256 of the driver plugins in %s, for the chart's drivers (helm -f)\n", ref)
	b.WriteString("drivers:\n")
	for _, p := range plugins {
		fmt.Fprintf(&b, "  %s:\n    path: %s\n    sha256: %q\n", p.Name, p.Path, p.SHA256)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
