package images_test

import (
	"context"
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
// config.
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New())
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

	if _, err := images.Push(context.Background(), l.Dir, "not a reference"); err == nil || !strings.Contains(err.Error(), "not a reference") {
		t.Errorf("bad reference: %v", err)
	}
}
