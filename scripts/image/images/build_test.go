package images_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"go.yaml.in/yaml/v3"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/dranode/dranode/scripts/image/images"
	"github.com/dranode/dranode/scripts/image/internal/layerfiles"
)

// TestBuildReproducible builds every image a second time, in another
// directory, with the binaries built afresh by another run of the image
// command, and the small images a third time in this process (the
// builder's own concurrency under the race detector), and wants the same
// bytes in every file of every layout.
func TestBuildReproducible(t *testing.T) {
	first := built(t)
	second, err := buildWithCommand(repoRoot(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sameLayouts(t, "a second build", first, second, images.Names())
	sameLayouts(t, "a build in process", first, builtInProcess(t), inProcessImages)
}

// sameLayouts wants the layouts of names in a and b to have the same
// digests and the same files, byte for byte.
func sameLayouts(t *testing.T, what string, a, b map[string]images.Layout, names []string) {
	t.Helper()
	for _, n := range names {
		la, lb := a[n], b[n]
		if la.Digest != lb.Digest {
			t.Errorf("%s: digest %s, then %s in %s", n, la.Digest, lb.Digest, what)
		}
		fa, fb := layoutFiles(t, la.Dir), layoutFiles(t, lb.Dir)
		if len(fa) < 5 { // oci-layout, index.json, manifest, config, a layer
			t.Fatalf("%s: only %d files in %s", n, len(fa), la.Dir)
		}
		if !reflect.DeepEqual(keys(fa), keys(fb)) {
			t.Errorf("%s: files %v, then %v in %s", n, keys(fa), keys(fb), what)
			continue
		}
		for f, data := range fa {
			if !bytes.Equal(data, fb[f]) {
				t.Errorf("%s: %s differs in %s", n, f, what)
			}
		}
	}
}

func layoutFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func keys(m map[string][]byte) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	slices.Sort(k)
	return k
}

// TestImageContents checks each image's name, platform, entrypoint and
// files: paths, modes and owners as the chart and the node expect.
func TestImageContents(t *testing.T) {
	layouts := built(t)
	tests := []struct {
		image      string
		entrypoint []string
		files      map[string]int64 // path in the layers -> mode
	}{
		{images.Agent, []string{"/usr/local/bin/dranode-agent"}, map[string]int64{
			"usr/local/bin/dranode-agent":     0o755,
			"usr/local/bin/dranodectl":        0o755,
			"opt/dranode/plugins/gpu-plugin":  0o755,
			"opt/dranode/plugins/loop-plugin": 0o755,
			"tmp/":                            0o1777,
		}},
		{images.Pause, []string{"/pause"}, map[string]int64{"pause": 0o755}},
		{images.Workload, []string{"/usr/local/bin/workload"}, map[string]int64{"usr/local/bin/workload": 0o755}},
	}
	for _, tc := range tests {
		t.Run(tc.image, func(t *testing.T) {
			l := layouts[tc.image]
			tag, err := images.DefaultTag(repoRoot(t))
			if err != nil {
				t.Fatal(err)
			}
			wantRef := "localhost/dranode/" + tc.image + ":" + tag
			if l.Ref != wantRef {
				t.Errorf("ref %q, want %q", l.Ref, wantRef)
			}
			// The name must already be in the form containerd and the CRI
			// normalise to, or the kubelet would not find the import.
			if r, err := name.ParseReference(l.Ref, name.StrictValidation); err != nil || r.Name() != l.Ref {
				t.Errorf("ref %q is not normalised (%v, %v)", l.Ref, r, err)
			}
			var wantPlatforms []string
			for _, a := range images.DefaultArches() {
				wantPlatforms = append(wantPlatforms, "linux/"+a)
			}
			if !reflect.DeepEqual(l.Platforms, wantPlatforms) {
				t.Errorf("platforms %v, want %v", l.Platforms, wantPlatforms)
			}
			img, desc, err := images.Image(l.Dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := indexJSONAnnotation(t, l.Dir, images.AnnotationRefName); got != tag {
				t.Errorf("index.json %s = %q, want the tag", images.AnnotationRefName, got)
			}
			for _, arch := range images.DefaultArches() {
				other, _, err := images.ImageFor(l.Dir, arch)
				if err != nil {
					t.Fatal(err)
				}
				if cf, err := other.ConfigFile(); err != nil || cf.Architecture != arch || cf.OS != "linux" {
					t.Errorf("the linux/%s image's config: %+v, %v", arch, cf, err)
				}
			}
			if desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != runtime.GOARCH {
				t.Errorf("index.json platform %+v", desc.Platform)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cf.Config.Entrypoint, tc.entrypoint) {
				t.Errorf("entrypoint %q, want %q", cf.Config.Entrypoint, tc.entrypoint)
			}
			if cf.Created.Unix() != 0 {
				t.Errorf("created %v, want the Unix epoch", cf.Created)
			}
			layers, err := img.Layers()
			if err != nil {
				t.Fatal(err)
			}
			if len(layers) == 0 {
				t.Fatal("no layers")
			}
			seen := map[string]int64{}
			err = layerfiles.Walk(img, func(hdr *tar.Header, r io.Reader) error {
				if hdr.Uid != 0 || hdr.Gid != 0 || hdr.ModTime.Unix() != 0 {
					t.Errorf("%s: uid %d gid %d mtime %v, want 0 0 epoch", hdr.Name, hdr.Uid, hdr.Gid, hdr.ModTime)
				}
				seen[hdr.Name] = hdr.Mode
				if hdr.Typeflag == tar.TypeReg && !isStaticLinuxELF(t, r) {
					t.Errorf("%s is not a static Linux ELF executable", hdr.Name)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for p, mode := range tc.files {
				got, ok := seen[p]
				if !ok {
					t.Errorf("%s missing (have %v)", p, seen)
				} else if got != mode {
					t.Errorf("%s: mode %o, want %o", p, got, mode)
				}
			}
		})
	}
}

// isStaticLinuxELF: an executable with no program interpreter (PT_INTERP),
// so it runs in an image with no libc.
func isStaticLinuxELF(t *testing.T, r io.Reader) bool {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return false
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return f.Type == elf.ET_EXEC
}

// TestPluginDigests: the digest the chart needs is the SHA-256 of the
// plugin binary as a user builds it from examples/gpu with the same flags,
// outside the image.
func TestPluginDigests(t *testing.T) {
	l := built(t)[images.Agent]
	plugins := builtAgentPlugins(t)
	var want []images.Plugin
	for _, p := range []struct{ name, pkg string }{{"gpu", "./gpu"}, {"loop", "./loop/cmd/loop-plugin"}} {
		bin := filepath.Join(t.TempDir(), p.name+"-plugin")
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-buildid= -w", "-o", bin, p.pkg)
		cmd.Dir = filepath.Join(repoRoot(t), "examples")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOWORK=off", "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		want = append(want, images.Plugin{Name: p.name, Path: "/opt/dranode/plugins/" + p.name + "-plugin", SHA256: hex.EncodeToString(sum[:])})
	}
	if !reflect.DeepEqual(plugins, want) {
		t.Fatalf("PluginDigests = %+v, want %+v", plugins, want)
	}
	var b strings.Builder
	if err := images.WriteChartValues(&b, l.Ref, plugins); err != nil {
		t.Fatal(err)
	}
	var values struct {
		Drivers map[string]struct{ Path, SHA256 string } `yaml:"drivers"`
	}
	if err := yaml.Unmarshal([]byte(b.String()), &values); err != nil {
		t.Fatalf("chart values do not decode: %v\n%s", err, b.String())
	}
	if d := values.Drivers["gpu"]; d.SHA256 != want[0].SHA256 || d.Path != want[0].Path {
		t.Errorf("chart values drivers.gpu = %+v, want path %s sha256 %s:\n%s", d, want[0].Path, want[0].SHA256, b.String())
	}

	// The pause image holds no plugins.
	none, err := images.PluginDigests(built(t)[images.Pause].Dir)
	if err != nil || len(none) != 0 {
		t.Errorf("pause: %v, %v; want no plugins", none, err)
	}
}

func TestBuildRefusesBadInput(t *testing.T) {
	root := repoRoot(t)
	tests := []struct {
		name string
		o    images.Options
		want string
	}{
		{"unknown image", images.Options{Root: root, Images: []string{"nginx"}}, `unknown image "nginx"`},
		{"bad tag", images.Options{Root: root, Tag: "v1:2", Images: []string{images.Pause}}, "v1:2"},
		{"no root", images.Options{}, "Root is empty"},
		{"negative epoch", images.Options{Root: root, SourceDateEpoch: -1}, "before the Unix epoch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Out = t.TempDir()
			_, err := images.Build(context.Background(), tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Build: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := images.Build(context.Background(), images.Options{Root: root, Out: t.TempDir(), Images: []string{"x"}}); !errors.Is(err, images.ErrUnknownImage) {
		t.Errorf("unknown image: %v is not ErrUnknownImage", err)
	}
}

func TestSourceDateEpoch(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want int64
		ok   bool
	}{{"", 0, true}, {"1700000000", 1700000000, true}, {"-5", 0, false}, {"yesterday", 0, false}} {
		t.Setenv("SOURCE_DATE_EPOCH", tc.env)
		got, err := images.SourceDateEpochFromEnv()
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("SOURCE_DATE_EPOCH=%q: %d, %v", tc.env, got, err)
		}
	}
}

// TestSourceDateEpochDates: a set epoch dates the config and every entry,
// and changes the digest.
func TestSourceDateEpochDates(t *testing.T) {
	const epoch = 1700000000
	l, err := images.Build(context.Background(), images.Options{Root: repoRoot(t), Out: t.TempDir(), Images: []string{images.Pause}, SourceDateEpoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	img, desc, err := images.Image(l[images.Pause].Dir)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	if cf.Created.Unix() != epoch || len(cf.History) != 1 || cf.History[0].Created.Unix() != epoch {
		t.Errorf("config created %v, history %+v; want %d", cf.Created, cf.History, epoch)
	}
	_, undated, err := images.Image(built(t)[images.Pause].Dir)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest == undated.Digest {
		t.Error("the digest did not change with the date")
	}
}

// TestBuildReproducibleElsewhere builds the pause and workload images from a
// copy of their sources at another path, with an empty Go build cache, so
// that nothing comes from a cache: the same platform images as the build
// from the repository. For this machine's architecture only: what it proves
// (no path and no cached object reaches an image) does not depend on the
// architecture, TestBuildReproducible builds every architecture twice, and
// each architecture compiles the standard library afresh here (86 s of a
// make check for two).
func TestBuildReproducibleElsewhere(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the standard library afresh")
	}
	want := built(t)
	root := t.TempDir()
	src := repoRoot(t)
	if err := os.CopyFS(filepath.Join(root, "scripts", "image"), os.DirFS(filepath.Join(src, "scripts", "image"))); err != nil {
		t.Fatal(err)
	}
	// versions.yaml gives the tag, LICENSE the licence (annotations and
	// SBOM), as in a release's sources.
	for _, name := range []string{"versions.yaml", "LICENSE"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("GOCACHE", t.TempDir())
	// The copy is no git work tree: the revision is given, as a release
	// build from a tarball would give it.
	got, err := images.Build(context.Background(), images.Options{Root: root, Out: t.TempDir(), Arch: runtime.GOARCH, Images: []string{images.Pause, images.Workload}, Revision: testRevision})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{images.Pause, images.Workload} {
		_, g, err := images.ImageFor(got[n].Dir, runtime.GOARCH)
		if err != nil {
			t.Fatal(err)
		}
		_, w, err := images.ImageFor(want[n].Dir, runtime.GOARCH)
		if err != nil {
			t.Fatal(err)
		}
		if g.Digest != w.Digest {
			t.Errorf("%s linux/%s: %s from a copy with a cold cache, %s from the repository", n, runtime.GOARCH, g.Digest, w.Digest)
		}
	}
}

// indexJSONAnnotation is the annotation key of the layout's index.json entry
// that is no artifact (the image index).
func indexJSONAnnotation(t *testing.T, dir, key string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx struct {
		Manifests []struct {
			ArtifactType string            `json:"artifactType"`
			Annotations  map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	for _, m := range idx.Manifests {
		if m.ArtifactType == "" {
			return m.Annotations[key]
		}
	}
	return ""
}
