package images_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/dranode/dranode/scripts/image/images"
	"github.com/dranode/dranode/scripts/image/internal/clibin"
)

// repoRoot is the repository this module is in.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "versions.yaml")); err != nil {
		t.Fatalf("repository root: %v", err)
	}
	return root
}

// testRevision is every test build's revision annotation: the default,
// git's HEAD, would change under a test that runs while a commit is made,
// and with it every digest.
const testRevision = "0123456789abcdef0123456789abcdef01234567"

var (
	sharedOnce    sync.Once
	sharedLayouts map[string]images.Layout
	sharedErr     error
	sharedDir     string

	inProcessOnce    sync.Once
	inProcessLayouts map[string]images.Layout
	inProcessErr     error
	inProcessDir     string

	agentPluginsOnce sync.Once
	agentPlugins     []images.Plugin
	agentPluginsErr  error
)

// built returns every image built once for the package's tests by the
// image command, as "make image" builds them (internal/clibin says why not
// in this process), into a directory removed by TestMain.
func built(t testing.TB) map[string]images.Layout {
	t.Helper()
	sharedOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "images-test-")
		if sharedErr != nil {
			return
		}
		sharedLayouts, sharedErr = buildWithCommand(repoRoot(t), sharedDir)
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedLayouts
}

// inProcessImages are the images builtInProcess builds: the small ones.
var inProcessImages = []string{images.Pause, images.Workload}

// builtInProcess returns the pause and workload images built once in this
// process, so that the builder's concurrency runs under the race detector.
// Only the small images: compressing the agent's layers instrumented took
// minutes.
func builtInProcess(t testing.TB) map[string]images.Layout {
	t.Helper()
	inProcessOnce.Do(func() {
		inProcessDir, inProcessErr = os.MkdirTemp("", "images-test-")
		if inProcessErr != nil {
			return
		}
		inProcessLayouts, inProcessErr = images.Build(context.Background(), images.Options{Root: repoRoot(t), Out: inProcessDir, Images: inProcessImages, Revision: testRevision})
	})
	if inProcessErr != nil {
		t.Fatal(inProcessErr)
	}
	return inProcessLayouts
}

// builtAgentPlugins is images.PluginDigests of the built agent image, read
// once: each read decompresses its layers under the race detector.
func builtAgentPlugins(t testing.TB) []images.Plugin {
	t.Helper()
	agentPluginsOnce.Do(func() {
		agentPlugins, agentPluginsErr = images.PluginDigests(built(t)[images.Agent].Dir)
	})
	if agentPluginsErr != nil {
		t.Fatal(agentPluginsErr)
	}
	return agentPlugins
}

// buildWithCommand builds every image into out with the image command
// and returns the layouts it printed, read back from their directories.
func buildWithCommand(root, out string) (map[string]images.Layout, error) {
	bin, err := clibin.Path(root)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-C", root, "build", "-out", out, "-revision", testRevision)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("image build: %w\n%s", err, stderr.String())
	}
	layouts := map[string]images.Layout{}
	for _, line := range strings.Split(strings.TrimSpace(string(stdout)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("image build printed %q, want dir, ref, digest, size", line)
		}
		l, err := images.ReadLayout(f[0])
		if err != nil {
			return nil, err
		}
		if l.Ref != f[1] || l.Digest != f[2] || strconv.FormatInt(l.Size, 10) != f[3] {
			return nil, fmt.Errorf("image build printed %q, the layout holds %s %s %d", line, l.Ref, l.Digest, l.Size)
		}
		layouts[l.Name] = l
	}
	return layouts, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range []string{sharedDir, inProcessDir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	clibin.Cleanup()
	os.Exit(code)
}
