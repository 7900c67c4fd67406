package node_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dranode/dranode/scripts/image/images"
)

// testImages are the images every test's node imports, built once per test
// binary by scripts/image (the code behind "make image").
var testImages struct {
	agent, pause, workload string // OCI archives
	agentRepo, tag         string
	pauseRef, workloadRef  string
	pluginSHA256           map[string]string // by the chart's driver name
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "dranode-node-images-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := buildImages(dir); err != nil {
		fmt.Fprintln(os.Stderr, "building the images:", err)
		return 1
	}
	return m.Run()
}

func buildImages(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	root, err := filepath.Abs("../..")
	if err != nil {
		return err
	}
	start := time.Now()
	// Only this machine's architecture: the node runs nothing else, and
	// the other's cross-compile would only cost time.
	layouts, err := images.Build(ctx, images.Options{Root: root, Out: filepath.Join(dir, "layouts"), Arch: runtime.GOARCH})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "images built in %s\n", time.Since(start).Round(time.Millisecond))
	archive := func(name string) (string, error) {
		l, ok := layouts[name]
		if !ok {
			return "", fmt.Errorf("no image %s built", name)
		}
		f := filepath.Join(dir, name+".tar")
		return f, images.ArchiveFile(l.Dir, f)
	}
	if testImages.agent, err = archive(images.Agent); err != nil {
		return err
	}
	if testImages.pause, err = archive(images.Pause); err != nil {
		return err
	}
	if testImages.workload, err = archive(images.Workload); err != nil {
		return err
	}
	agent := layouts[images.Agent].Ref
	i := strings.LastIndexByte(agent, ':')
	testImages.agentRepo, testImages.tag = agent[:i], agent[i+1:]
	testImages.pauseRef, testImages.workloadRef = layouts[images.Pause].Ref, layouts[images.Workload].Ref
	plugins, err := images.PluginDigests(layouts[images.Agent].Dir)
	if err != nil {
		return err
	}
	testImages.pluginSHA256 = map[string]string{}
	for _, p := range plugins {
		testImages.pluginSHA256[p.Name] = p.SHA256
	}
	return nil
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
