package node_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

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

// helmBinary is helm, built (or found in its cache) by TestMain.
var helmBinary string

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
	// helm too, before any test's deadline starts: on an empty cache it
	// is built from source, which took 9.5 of a test's 10 minutes in a
	// cold make check (the test then failed waiting for the agent).
	out, err := exec.Command("../../scripts/build-helm.sh").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scripts/build-helm.sh:", err)
		return 1
	}
	helmBinary = strings.TrimSpace(string(out))
	return m.Run()
}

// buildImages builds the images with the image command (scripts/image,
// what "make image" runs), not in this process: under -race the layers'
// compression and the plugins' digests (which decompress the agent's
// layers) ran instrumented, most of this package's CPU time before its
// first test (scripts/image/internal/clibin says the same of that
// module's tests). The command is built without the race detector.
func buildImages(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	root, err := filepath.Abs("../..")
	if err != nil {
		return err
	}
	start := time.Now()
	bin := filepath.Join(dir, "image")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(root, "scripts", "image")
	// The module is outside go.work.
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build of the image command: %w\n%s", err, out)
	}
	image := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, bin, append([]string{"-C", root}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("image %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return out, nil
	}
	// Only this machine's architecture: the node runs nothing else, and
	// the other's cross-compile would only cost time.
	out, err := image("build", "-out", filepath.Join(dir, "layouts"), "-arch", runtime.GOARCH)
	if err != nil {
		return err
	}
	layouts := map[string]images.Layout{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			return fmt.Errorf("image build printed %q, want dir, ref, digest, size", line)
		}
		l, err := images.ReadLayout(f[0])
		if err != nil {
			return err
		}
		layouts[l.Name] = l
	}
	archive := func(name string) (string, error) {
		l, ok := layouts[name]
		if !ok {
			return "", fmt.Errorf("no image %s built", name)
		}
		f := filepath.Join(dir, name+".tar")
		_, err := image("archive", l.Dir, f)
		return f, err
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
	// The plugins' sha256 as the runbook has the operator take them:
	// "scripts/image digests" prints them as the chart's drivers values.
	out, err = image("digests", layouts[images.Agent].Dir)
	if err != nil {
		return err
	}
	var values struct {
		Drivers map[string]struct {
			Path   string `json:"path"`
			SHA256 string `json:"sha256"`
		} `json:"drivers"`
	}
	if err := yaml.UnmarshalStrict(out, &values); err != nil {
		return fmt.Errorf("image digests: %w\n%s", err, out)
	}
	testImages.pluginSHA256 = map[string]string{}
	for name, d := range values.Drivers {
		testImages.pluginSHA256[name] = d.SHA256
	}
	if len(testImages.pluginSHA256) == 0 {
		return fmt.Errorf("image digests printed no plugin:\n%s", out)
	}
	fmt.Fprintf(os.Stderr, "images built in %s\n", time.Since(start).Round(time.Millisecond))
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
