package pluginmgr_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/pluginmgr/conformance"
	"github.com/dranode/dranode/pluginmgr/internal/testbin"
)

// TestReadmeWalkthrough keeps the README's first driver honest: the README
// shows internal/hellodriver/main.go exactly, and that driver builds, runs
// and passes the conformance kit.
func TestReadmeWalkthrough(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	source, err := os.ReadFile("internal/hellodriver/main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "<!-- hellodriver begin -->\n```go\n")
	block, _, ok2 := strings.Cut(rest, "```\n<!-- hellodriver end -->")
	if !ok || !ok2 {
		t.Fatal("README has no hellodriver code block")
	}
	if block != string(source) {
		t.Fatal("README's walkthrough differs from internal/hellodriver/main.go; copy the file into the README")
	}

	bin, err := testbin.Build(t.TempDir(), "hello-plugin", "./internal/hellodriver")
	if err != nil {
		t.Fatal(err)
	}
	opts := quietOptions()
	p, err := pluginmgr.Launch(context.Background(), pluginmgr.PluginConfig{Path: bin, SHA256: testbin.SHA256(bin), Config: []byte(`{}`)}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	conformance.Run(t, p, conformance.Options{})
}
