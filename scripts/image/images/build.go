package images

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"go.yaml.in/yaml/v3"
)

// Annotations on the manifest descriptor in a layout's index.json that name
// the image; containerd's import reads the first, and the second when the
// first is missing.
const (
	AnnotationImageName = "io.containerd.image.name"
	AnnotationRefName   = "org.opencontainers.image.ref.name"
)

// Options configure [Build]. Only Root is required.
type Options struct {
	// Root is the repository root (the directory holding versions.yaml).
	Root string
	// Out is where the layouts go, one directory per image; default
	// <Root>/bin/images.
	Out string
	// Tag is every image's tag; default the agent module set's version in
	// versions.yaml.
	Tag string
	// Arches are the GOARCHes to build for: each image is an OCI image
	// index with one image per architecture. Default [DefaultArches]. The
	// OS is always linux.
	Arches []string
	// Arch, when set, builds for this one GOARCH instead of Arches (an
	// index of one image): a harness that runs the images here needs no
	// other.
	Arch string
	// Images are the names to build; default all of [Names].
	Images []string
	// SourceDateEpoch is the time of every timestamp in the images, in
	// seconds since the Unix epoch; 0 is the Unix epoch itself.
	// [SourceDateEpochFromEnv] reads the SOURCE_DATE_EPOCH convention.
	SourceDateEpoch int64
	// Revision is the source revision the images are built from, the
	// org.opencontainers.image.revision annotation; default [Revision] of
	// Root ("" outside a git work tree: no annotation).
	Revision string
	// Go is the go command; default "go" from PATH.
	Go string
	// Log receives one line per step; nil discards them.
	Log io.Writer

	licence string // the repository's (RepositoryLicence), set by defaults
}

// Layout is one image written by [Build] or read by [ReadLayout].
type Layout struct {
	// Name is the image's name, e.g. [Agent].
	Name string
	// Ref is the full, normalised image reference in the index.json, e.g.
	// localhost/dranode/dranode-agent:v0.1.0.
	Ref string
	// Dir is the OCI image layout directory.
	Dir string
	// Digest is the image index's digest ("sha256:..."), the digest the
	// tag names once pushed.
	Digest string
	// Size is the sum of the sizes of the blobs of the index and its
	// images (manifests, configs, compressed layers; not the SBOMs).
	Size int64
	// Platforms are the index's images' os/architecture, e.g.
	// [linux/amd64 linux/arm64].
	Platforms []string
}

// ErrUnknownImage is wrapped by [Build] for an image name it does not know.
var ErrUnknownImage = errors.New("unknown image")

// SourceDateEpochFromEnv returns SOURCE_DATE_EPOCH (reproducible-builds.org)
// as seconds, or 0 (the Unix epoch) when it is unset or empty.
func SourceDateEpochFromEnv() (int64, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want a non-negative integer number of seconds", s)
	}
	return n, nil
}

// Reference returns the full reference of image name at tag as Build writes
// it, or an error naming a tag the reference grammar refuses.
func Reference(imageName, tag string) (string, error) {
	ref := Registry + "/dranode/" + imageName + ":" + tag
	t, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	return t.Name(), nil
}

// DefaultTag returns the version of the module set holding the agent in
// root's versions.yaml.
func DefaultTag(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "versions.yaml"))
	if err != nil {
		return "", err
	}
	var v struct {
		Sets map[string]struct {
			Version string   `yaml:"version"`
			Modules []string `yaml:"modules"`
		} `yaml:"module-sets"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		return "", fmt.Errorf("versions.yaml: %w", err)
	}
	for _, s := range v.Sets {
		for _, m := range s.Modules {
			if m == "agent" {
				if s.Version == "" {
					return "", errors.New("versions.yaml: the agent's module set has no version")
				}
				return s.Version, nil
			}
		}
	}
	return "", errors.New("versions.yaml: no module set holds agent")
}

func (o *Options) defaults() error {
	if o.Root == "" {
		return errors.New("images: Options.Root is empty")
	}
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return err
	}
	o.Root = root
	if o.Out == "" {
		o.Out = filepath.Join(o.Root, "bin", "images")
	}
	if o.Tag == "" {
		if o.Tag, err = DefaultTag(o.Root); err != nil {
			return fmt.Errorf("images: default tag: %w", err)
		}
	}
	switch {
	case o.Arch != "":
		o.Arches = []string{o.Arch}
	case len(o.Arches) == 0:
		o.Arches = DefaultArches()
	}
	if len(o.Images) == 0 {
		o.Images = Names()
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Revision == "" {
		o.Revision = Revision(o.Root)
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	o.licence = RepositoryLicence(o.Root)
	// Build's steps run side by side; each line is one Write.
	o.Log = &lockedWriter{w: o.Log}
	if o.SourceDateEpoch < 0 {
		return fmt.Errorf("images: SourceDateEpoch %d is before the Unix epoch", o.SourceDateEpoch)
	}
	for _, n := range o.Images {
		if _, ok := specs[n]; !ok {
			return fmt.Errorf("images: %w %q (known: %s)", ErrUnknownImage, n, strings.Join(Names(), ", "))
		}
	}
	return nil
}

// Build builds the images o.Images and writes each as an OCI image layout
// at <o.Out>/<name>, replacing what was there. It returns the layouts by
// image name. The go command compiles the binaries, each in its own module
// with GOWORK=off as the module's users build it; its build cache makes a
// second Build fast.
func Build(ctx context.Context, o Options) (map[string]Layout, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	binDir, err := os.MkdirTemp(o.Out, ".bin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(binDir)

	refs := map[string]string{}
	for _, n := range o.Images {
		if refs[n], err = Reference(n, o.Tag); err != nil {
			return nil, err
		}
	}
	built, err := buildBinaries(ctx, o, binDir)
	if err != nil {
		return nil, err
	}
	lic, err := newLicences(ctx, o)
	if err != nil {
		return nil, err
	}
	// Each platform's image is independent of the others: compressing one
	// image's layers (a single core each) runs beside another's.
	plats := map[string][]platformImage{}
	var jobs []func() error
	for _, n := range o.Images {
		plats[n] = make([]platformImage, len(o.Arches))
		for i, arch := range o.Arches {
			jobs = append(jobs, func() error {
				spec := specs[n]
				img, err := buildImage(spec, built[arch], o, arch)
				if err != nil {
					return fmt.Errorf("image %s (%s): %w", n, arch, err)
				}
				doc, err := sbom(n+"/"+arch, refs[n], imageBinaries(spec), built[arch], time.Unix(o.SourceDateEpoch, 0), lic)
				if err != nil {
					return fmt.Errorf("image %s (%s): SBOM: %w", n, arch, err)
				}
				plats[n][i] = platformImage{arch: arch, img: img, sbom: doc}
				return nil
			})
		}
	}
	if err := runBounded(jobs); err != nil {
		return nil, err
	}
	out := map[string]Layout{}
	for _, n := range o.Images {
		dst := filepath.Join(o.Out, n)
		if err := writeLayout(plats[n], refs[n], o, dst); err != nil {
			return nil, fmt.Errorf("image %s: %w", n, err)
		}
		lay, err := ReadLayout(dst)
		if err != nil {
			return nil, err
		}
		lay.Name = n
		fmt.Fprintf(o.Log, "image %s: %s %s, %d bytes, %s\n", n, lay.Ref, strings.Join(lay.Platforms, ","), lay.Size, lay.Digest)
		out[n] = lay
	}
	return out, nil
}

// buildBinaries compiles every binary of o.Images for every architecture
// of o.Arches once, into binDir, and returns their files by architecture.
func buildBinaries(ctx context.Context, o Options, binDir string) (map[string]map[binary]string, error) {
	built := map[string]map[binary]string{}
	var jobs []func() error
	for _, arch := range o.Arches {
		built[arch] = map[binary]string{}
		for _, n := range o.Images {
			for _, b := range imageBinaries(specs[n]) {
				if _, ok := built[arch][b]; ok {
					continue
				}
				file := filepath.Join(binDir, arch, strconv.Itoa(len(built[arch])), path.Base(b.path))
				built[arch][b] = file
				jobs = append(jobs, func() error { return goBuild(ctx, o, arch, b, file) })
			}
		}
	}
	return built, runBounded(jobs)
}

// runBounded runs jobs, as many at once as the process may use CPUs, and
// returns their errors joined.
func runBounded(jobs []func() error) error {
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = job()
		}()
	}
	wg.Wait()
	return errors.Join(slices.DeleteFunc(errs, func(err error) bool { return err == nil })...)
}

// Revision returns the git commit checked out in root, with "-dirty" when
// tracked files differ from it, or "" when root is not in a git work tree.
func Revision(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		rev += "-dirty"
	}
	return rev
}

// DefaultArches are the architectures Build builds for by default.
func DefaultArches() []string { return []string{"amd64", "arm64"} }

// platformImage is one architecture's image of an index, with its SBOM.
type platformImage struct {
	arch string
	img  v1.Image
	sbom []byte
}

// goBuild compiles b for linux/arch into file, reproducibly (CGO off, so
// any architecture cross-compiles here), without DWARF (README.md says why).
func goBuild(ctx context.Context, o Options, arch string, b binary, file string) error {
	fmt.Fprintf(o.Log, "go build %s (%s) linux/%s -> %s\n", b.pkg, b.module, arch, b.path)
	cmd := exec.CommandContext(ctx, o.Go, "build", "-trimpath", "-buildvcs=false", "-ldflags=-buildid= -w", "-o", file, b.pkg)
	cmd.Dir = filepath.Join(o.Root, filepath.FromSlash(b.module))
	cmd.Env = append(os.Environ(),
		"CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOWORK=off",
		// A developer's GOFLAGS (-race, -cover, a -ldflags) would change
		// the bytes.
		"GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", b.pkg, b.module, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// annotations are the OCI annotations of every image and index Build makes.
func annotations(o Options) map[string]string {
	a := map[string]string{
		AnnotationSource:   Source,
		AnnotationVersion:  o.Tag,
		AnnotationLicenses: o.licence,
		AnnotationCreated:  time.Unix(o.SourceDateEpoch, 0).UTC().Format(time.RFC3339),
	}
	if o.Revision != "" {
		a[AnnotationRevision] = o.Revision
	}
	return a
}

func buildImage(spec imageSpec, built map[binary]string, o Options, arch string) (v1.Image, error) {
	created := time.Unix(o.SourceDateEpoch, 0).UTC()
	annotations := annotations(o)
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Created:      v1.Time{Time: created},
		Config: v1.Config{
			Entrypoint: spec.entrypoint,
			Labels:     annotations,
			Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			WorkingDir: "/",
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	for _, l := range spec.layers {
		layer, err := newMemLayer(func(w io.Writer) error { return writeLayerTar(w, l, built, created) })
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   layer,
			History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "dranode scripts/image", Comment: l.comment},
		})
		if err != nil {
			return nil, err
		}
	}
	return mutate.Annotations(img, annotations).(v1.Image), nil
}

// writeLayerTar writes an uncompressed layer to w: the binaries at their paths,
// mode 0755, with every parent directory, owned by root and dated created,
// entries sorted by path so the bytes never depend on map order.
func writeLayerTar(w io.Writer, l layerSpec, built map[binary]string, created time.Time) error {
	type entry struct {
		hdr  tar.Header
		file string
	}
	entries := map[string]entry{}
	addDir := func(p string, mode int64) {
		for d := p; d != "/" && d != "."; d = path.Dir(d) {
			name := strings.TrimPrefix(d, "/") + "/"
			if _, ok := entries[name]; ok && d != p {
				continue
			}
			m := int64(0o755)
			if d == p {
				m = mode
			}
			entries[name] = entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: m}}
		}
	}
	for _, d := range l.dirs {
		addDir(d.path, d.mode)
	}
	for _, b := range l.binaries {
		file, ok := built[b]
		if !ok {
			return fmt.Errorf("binary %s was not built", b.path)
		}
		fi, err := os.Stat(file)
		if err != nil {
			return err
		}
		if parent := path.Dir(b.path); parent != "/" {
			if _, ok := entries[strings.TrimPrefix(parent, "/")+"/"]; !ok {
				addDir(parent, 0o755)
			}
		}
		name := strings.TrimPrefix(b.path, "/")
		entries[name] = entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: fi.Size()}, file: file}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)

	tw := tar.NewWriter(w)
	for _, n := range names {
		e := entries[n]
		e.hdr.ModTime = created
		e.hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return err
		}
		if e.file == "" {
			continue
		}
		f, err := os.Open(e.file)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", e.file, err)
		}
	}
	return tw.Close()
}

// writeLayout writes img as the only image of a fresh layout and then moves
// it to dst, so dst never holds a half-written layout or blobs of an older
// build.
func writeLayout(plats []platformImage, ref string, o Options, dst string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(dst), "."+filepath.Base(dst)+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	t, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return err
	}
	var idx v1.ImageIndex = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, pi := range plats {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: pi.img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: pi.arch}}})
	}
	idx = mutate.Annotations(idx, annotations(o)).(v1.ImageIndex)
	err = p.AppendIndex(idx,
		layout.WithAnnotations(map[string]string{
			AnnotationImageName: ref,
			// OCI wants only the tag here; containerd uses it when the
			// first annotation is missing, other tools (skopeo's
			// oci:DIR:TAG) always.
			AnnotationRefName: t.TagStr(),
		}))
	if err != nil {
		return err
	}
	for _, pi := range plats {
		digest, err := pi.img.Digest()
		if err != nil {
			return err
		}
		size, err := pi.img.Size()
		if err != nil {
			return err
		}
		if err := appendSBOM(p, v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: digest, Size: size}, pi.sbom); err != nil {
			return fmt.Errorf("SBOM of linux/%s: %w", pi.arch, err)
		}
	}
	// MkdirTemp and the library's temporary blob files are private; a
	// layout is read by others (a node's import, a web server).
	err = filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		return os.Chmod(p, mode)
	})
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// lockedWriter serialises the writes of Build's concurrent steps.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
