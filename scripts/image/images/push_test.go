package images_test

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/dranode/dranode/scripts/image/images"
)

// TestPush pushes to a registry on loopback (go-containerregistry's registry
// implementation, in process) and pulls the image back: same digest, same
// config; and each platform's SBOM is there as its referrer, through the
// referrers API or, for a registry without it, the referrers tag schema.
func TestPush(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []registry.Option
	}{
		{"referrers API", []registry.Option{registry.WithReferrersSupport(true)}},
		{"referrers tag schema", nil},
	} {
		t.Run(tt.name, func(t *testing.T) { testPush(t, tt.opts...) })
	}
}

func testPush(t *testing.T, opts ...registry.Option) {
	srv := httptest.NewServer(registry.New(opts...))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	l := built(t)[images.Workload]

	ref := host + "/dranode/workload:test"
	digest, err := images.Push(context.Background(), l.Dir, ref)
	if err != nil {
		t.Fatal(err)
	}
	if digest != l.Digest {
		t.Errorf("Push returned %s, layout has %s", digest, l.Digest)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != l.Digest {
		t.Errorf("pulled index %s, pushed %s", got, l.Digest)
	}
	// A client of this machine's platform gets the image the layout holds
	// for it.
	pulled, err := remote.Image(r)
	if err != nil {
		t.Fatal(err)
	}
	_, local, err := images.Image(l.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := pulled.Digest(); err != nil || d != local.Digest {
		t.Errorf("pulled image %s (%v), the layout's for this platform %s", d, err, local.Digest)
	}
	cf, err := pulled.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/usr/local/bin/workload" {
		t.Errorf("pulled entrypoint %q", cf.Config.Entrypoint)
	}

	for _, arch := range l.Platforms {
		arch = strings.TrimPrefix(arch, "linux/")
		_, img, err := images.ImageFor(l.Dir, arch)
		if err != nil {
			t.Fatal(err)
		}
		_, want, err := images.SBOMFor(l.Dir, arch)
		if err != nil {
			t.Fatal(err)
		}
		refs, err := remote.Referrers(r.Context().Digest(img.Digest.String()))
		if err != nil {
			t.Fatalf("referrers of linux/%s: %v", arch, err)
		}
		rm, err := refs.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		// The descriptor's artifactType is not checked: go-containerregistry's
		// registry gives the config's media type there even when the
		// manifest has an artifactType (the distribution spec wants the
		// latter); the manifest is.
		if len(rm.Manifests) != 1 {
			t.Fatalf("referrers of linux/%s: %+v, want its SBOM", arch, rm.Manifests)
		}
		sbom, err := remote.Image(r.Context().Digest(rm.Manifests[0].Digest.String()))
		if err != nil {
			t.Fatal(err)
		}
		mf, err := sbom.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if mf.ArtifactType != images.SBOMMediaType || mf.Subject == nil || mf.Subject.Digest != img.Digest {
			t.Fatalf("referrer of linux/%s: artifactType %q, subject %+v; want %s of %s", arch, mf.ArtifactType, mf.Subject, images.SBOMMediaType, img.Digest)
		}
		layers, err := sbom.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("SBOM of linux/%s: %d layers, %v", arch, len(layers), err)
		}
		rc, err := layers[0].Compressed()
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("SBOM of linux/%s pulled back differs from the layout's (%d bytes, want %d)", arch, len(got), len(want))
		}
	}

	if _, err := images.Push(context.Background(), l.Dir, "not a reference"); err == nil || !strings.Contains(err.Error(), "not a reference") {
		t.Errorf("bad reference: %v", err)
	}
}
