package layerfiles

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// tarOf is a tar stream of the named files, in order.
func tarOf(t *testing.T, files ...[2]string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f[0], Mode: 0o644, Size: int64(len(f[1])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gzipLayer(t *testing.T, data []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestWalkReadsEveryLayerInOrder(t *testing.T) {
	img, err := mutate.AppendLayers(empty.Image,
		gzipLayer(t, tarOf(t, [2]string{"a", "first"}, [2]string{"dir/b", "second"})),
		gzipLayer(t, tarOf(t, [2]string{"c", strings.Repeat("x", 1<<20)})))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = Walk(img, func(hdr *tar.Header, r io.Reader) error {
		data, err := io.ReadAll(r)
		got = append(got, hdr.Name+"="+string(data[:min(len(data), 6)]))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a=first", "dir/b=second", "c=xxxxxx"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("walked %v, want %v", got, want)
	}
}

func TestWalkStopsAtTheCallbacksError(t *testing.T) {
	img, err := mutate.AppendLayers(empty.Image, gzipLayer(t, tarOf(t, [2]string{"a", "1"}, [2]string{"b", strings.Repeat("y", 1<<20)})))
	if err != nil {
		t.Fatal(err)
	}
	stop := io.ErrShortWrite
	calls := 0
	err = Walk(img, func(*tar.Header, io.Reader) error { calls++; return stop })
	if err == nil || !strings.Contains(err.Error(), stop.Error()) || calls != 1 {
		t.Errorf("Walk = %v after %d calls, want the callback's error after 1", err, calls)
	}
}

func TestWalkRefusesUncompressedLayers(t *testing.T) {
	img, err := mutate.AppendLayers(empty.Image, static.NewLayer(tarOf(t, [2]string{"a", "1"}), types.OCIUncompressedLayer))
	if err != nil {
		t.Fatal(err)
	}
	err = Walk(img, func(*tar.Header, io.Reader) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "want a gzip-compressed tar") {
		t.Errorf("Walk = %v, want the media type refused", err)
	}
}
