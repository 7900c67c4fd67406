// Package layerfiles walks the files of an image's layers for the tests,
// decompressing them through the system's gzip.
//
// Under "go test -race" Go's compress/flate runs instrumented, and reading
// the agent image's layers took 25 to 35 s per test that way; gzip takes
// under a second. The layers are still read by an implementation other
// than the one that wrote them, as a node's runtime reads them. The
// package's own readers (images.PluginDigests) keep their tests in
// process.
package layerfiles

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Walk calls fn for every entry of img's layers, in order, with the
// entry's content as r. A layer that is not gzip-compressed is an error.
func Walk(img v1.Image, fn func(hdr *tar.Header, r io.Reader) error) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for i, l := range layers {
		mt, err := l.MediaType()
		if err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		if !strings.HasSuffix(string(mt), "gzip") {
			return fmt.Errorf("layer %d: media type %s, want a gzip-compressed tar", i, mt)
		}
		if err := walkLayer(l, fn); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return nil
}

func walkLayer(l v1.Layer, fn func(hdr *tar.Header, r io.Reader) error) error {
	rc, err := l.Compressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	gz := exec.Command("gzip", "-dc")
	gz.Stdin = rc
	var stderr strings.Builder
	gz.Stderr = &stderr
	out, err := gz.StdoutPipe()
	if err != nil {
		return err
	}
	if err := gz.Start(); err != nil {
		return fmt.Errorf("gzip: %w", err)
	}
	werr := walkTar(out, fn)
	// Drained, so that gzip is not stopped by a closed pipe after an
	// early return.
	io.Copy(io.Discard, out)
	if err := gz.Wait(); err != nil {
		return errors.Join(werr, fmt.Errorf("gzip -dc: %w: %s", err, strings.TrimSpace(stderr.String())))
	}
	return werr
}

func walkTar(r io.Reader, fn func(hdr *tar.Header, r io.Reader) error) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(hdr, tr); err != nil {
			return err
		}
	}
}
