package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/dranode/dranode/scripts/image/images"
	"github.com/dranode/dranode/scripts/image/internal/clibin"
	"github.com/dranode/dranode/scripts/image/internal/layerfiles"
)

func TestMain(m *testing.M) {
	code := m.Run()
	clibin.Cleanup()
	os.Exit(code)
}

// TestCommands runs build, digests and archive as "make image" and a user
// would: build and digests as the command itself (in this process, under
// -race, compressing and reading layers takes minutes; internal/clibin),
// archive through run. The digests are checked against the plugin files
// read from the layers by another reader (internal/layerfiles).
func TestCommands(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bin, err := clibin.Path(root)
	if err != nil {
		t.Fatal(err)
	}
	var out, stderr bytes.Buffer
	// One architecture, as a harness builds for its node: the images
	// package's tests build the index of every architecture.
	build := exec.Command(bin, "-C", root, "build", "-out", t.TempDir(), "-tag", "test", "-arch", runtime.GOARCH, images.Agent)
	build.Stdout, build.Stderr = &out, &stderr
	if err := build.Run(); err != nil {
		t.Fatalf("image build: %v\n%s", err, stderr.String())
	}
	fields := strings.Split(strings.TrimSpace(out.String()), "\t")
	if len(fields) != 4 || fields[1] != "localhost/dranode/dranode-agent:test" {
		t.Fatalf("build printed %q, want dir, ref, digest, size", out.String())
	}
	dir := fields[0]

	out.Reset()
	digests := exec.Command(bin, "digests", dir)
	digests.Stdout, digests.Stderr = &out, &stderr
	if err := digests.Run(); err != nil {
		t.Fatalf("image digests: %v\n%s", err, stderr.String())
	}
	var values struct {
		Drivers map[string]struct{ Path, SHA256 string }
	}
	if err := yaml.Unmarshal(out.Bytes(), &values); err != nil {
		t.Fatalf("digests output is not YAML: %v\n%s", err, out.String())
	}
	plugins := pluginFiles(t, dir)
	// Every plugin in the image (gpu, loop), by the chart's driver name.
	if len(values.Drivers) != len(plugins) || len(plugins) < 2 {
		t.Errorf("digests printed %+v, want one entry for each of the image's plugins %v", values.Drivers, plugins)
	}
	for p, sum := range plugins {
		name := strings.TrimSuffix(path.Base(p), "-plugin")
		if d := values.Drivers[name]; d.Path != p || d.SHA256 != sum {
			t.Errorf("digests printed %s as %+v, want %s at %s", name, d, p, sum)
		}
	}

	tarFile := filepath.Join(t.TempDir(), "agent.tar")
	if err := run(ctx, []string{"archive", dir, tarFile}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(tarFile); err != nil || fi.Size() == 0 {
		t.Errorf("archive: %v, %v", fi, err)
	}
}

// pluginFiles reads the layers of the layout's image for this machine's
// architecture, as another reader than the command's would, and returns the
// SHA-256 of each file in the plugin directory by its path.
func pluginFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	img, _, err := images.Image(dir)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	err = layerfiles.Walk(img, func(hdr *tar.Header, r io.Reader) error {
		p := "/" + path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		if hdr.Typeflag != tar.TypeReg || path.Dir(p) != images.PluginDir {
			return nil
		}
		h := sha256.New()
		if _, err := io.Copy(h, r); err != nil {
			return err
		}
		sums[p] = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"frobnicate"},
		{"archive", "only-one"},
		{"push", "dir"},
		{"digests"},
		{"build", "-nope"},
	} {
		err := run(context.Background(), args, io.Discard, io.Discard)
		var u usageError
		if !errors.As(err, &u) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	if err := run(context.Background(), []string{"digests", t.TempDir()}, io.Discard, io.Discard); err == nil {
		t.Error("digests of an empty directory succeeded")
	}
}
