package images_test

import (
	"context"
	"os"
	"path/filepath"
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
)

// built returns every image built once for the package's tests, into a
// directory removed by TestMain.
func built(t testing.TB) map[string]images.Layout {
	t.Helper()
	sharedOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "images-test-")
		if sharedErr != nil {
			return
		}
		sharedLayouts, sharedErr = images.Build(context.Background(), images.Options{Root: repoRoot(t), Out: sharedDir, Revision: testRevision})
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedLayouts
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	clibin.Cleanup()
	os.Exit(code)
}
