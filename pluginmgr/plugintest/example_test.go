package plugintest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/dranode/dranode/pluginmgr/plugintest"
)

// A test builds the command it runs once, in TestMain or a sync.Once.
func ExampleBuild() {
	dir, err := os.MkdirTemp("", "example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	bin, err := plugintest.Build(context.Background(), "testdata/hello", ".", filepath.Join(dir, "hello"))
	if err != nil {
		panic(err)
	}
	out, err := exec.Command(bin, "world").Output()
	if err != nil {
		panic(err)
	}
	fmt.Print(string(out))
	// Output: hello [world] CGO_ENABLED=0
}
