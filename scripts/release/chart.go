package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The Helm chart deploys the agent's image, so it carries the version of the
// module set holding the agent: Chart.yaml's version (without the "v", as
// Helm wants SemVer 2) and appVersion, and values.yaml's image.tag, which
// scripts/image also takes from versions.yaml. One version everywhere, or an
// operator installs a chart whose image was never built.
const (
	chartDir    = "examples/deploy/chart/dranode"
	chartModule = "agent" // the module whose set versions the chart
)

// chartPlugin is the example plugin whose SHA-256 the released chart
// carries, built as scripts/image builds it into the image (spec.go there:
// module examples, package ./gpu, the same flags): "make image" is
// reproducible, so the digest of this build is the digest in the released
// image, for the same Go toolchain. linux/amd64 is the platform the values
// describe; another platform's digest is "scripts/image digests" away.
var chartPlugin = struct{ module, pkg, driver, goarch string }{"examples", "./gpu", "gpu", "amd64"}

// chartState is what the chart says about versions.
type chartState struct {
	Version, AppVersion, Tag, PluginSHA256 string
}

func readChart(root string) (*chartState, error) {
	dir := filepath.Join(root, filepath.FromSlash(chartDir))
	var c struct {
		Version    string `yaml:"version"`
		AppVersion string `yaml:"appVersion"`
	}
	var v struct {
		Image struct {
			Tag string `yaml:"tag"`
		} `yaml:"image"`
		Drivers map[string]struct {
			SHA256 string `yaml:"sha256"`
		} `yaml:"drivers"`
	}
	for file, into := range map[string]any{"Chart.yaml": &c, "values.yaml": &v} {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return nil, err
		}
		if err := yaml.Unmarshal(data, into); err != nil {
			return nil, fmt.Errorf("%s/%s: %w", chartDir, file, err)
		}
	}
	return &chartState{Version: c.Version, AppVersion: c.AppVersion, Tag: v.Image.Tag, PluginSHA256: v.Drivers[chartPlugin.driver].SHA256}, nil
}

// checkChart holds the chart to the version of chartModule's set. A
// repository without the chart has nothing to check.
func checkChart(r *Repo) []string {
	if _, err := os.Stat(filepath.Join(r.Root, filepath.FromSlash(chartDir), "Chart.yaml")); os.IsNotExist(err) {
		return nil
	}
	setName := r.Versions.SetOf(chartModule)
	if setName == "" {
		return nil
	}
	set, _ := r.Versions.Set(setName)
	c, err := readChart(r.Root)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	for _, f := range []struct{ where, got, want string }{
		{"Chart.yaml version", c.Version, strings.TrimPrefix(set.Version, "v")},
		{"Chart.yaml appVersion", c.AppVersion, set.Version},
		{"values.yaml image.tag", c.Tag, set.Version},
	} {
		if f.got != f.want {
			problems = append(problems, fmt.Sprintf("%s/%s is %q, but versions.yaml releases %s (set %q) at %s; run: make release-prepare SET=%s",
				chartDir, f.where, f.got, chartModule, setName, set.Version, setName))
		}
	}
	if !isSHA256(c.PluginSHA256) || strings.Trim(c.PluginSHA256, "0") == "" {
		problems = append(problems, fmt.Sprintf("%s/values.yaml drivers.%s.sha256 is %q, not the plugin's SHA-256: the chart would not start; run: make release-prepare SET=%s",
			chartDir, chartPlugin.driver, c.PluginSHA256, setName))
	}
	return problems
}

func isSHA256(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && len(s) == 64
}

// Lines prepareChart rewrites, found by their place in the files as
// shipped; the result is read back as YAML, so a moved line is an error,
// never a silent miss.
var (
	reChartVersion    = regexp.MustCompile(`(?m)^version:.*$`)
	reChartAppVersion = regexp.MustCompile(`(?m)^appVersion:.*$`)
	reImageTag        = regexp.MustCompile(`(?m)^(image:\n(?:  .*\n|\s*#.*\n)*?)  tag:.*$`)
	rePluginSHA256    = regexp.MustCompile(`(?m)^(  ` + chartPlugin.driver + `:\n(?:    .*\n|\s*#.*\n)*?)    sha256:.*$`)
)

// prepareChart writes the set's version into the chart and the example
// plugin's SHA-256 (pluginSum) into its values, when the set holds
// chartModule.
func prepareChart(r *Repo, setName string, pluginSum func(root string) (string, error)) ([]Change, error) {
	if r.Versions.SetOf(chartModule) != setName {
		return nil, nil
	}
	dir := filepath.Join(r.Root, filepath.FromSlash(chartDir))
	if _, err := os.Stat(filepath.Join(dir, "Chart.yaml")); os.IsNotExist(err) {
		return nil, nil
	}
	set, _ := r.Versions.Set(setName)
	before, err := readChart(r.Root)
	if err != nil {
		return nil, err
	}
	sum, err := pluginSum(r.Root)
	if err != nil {
		return nil, fmt.Errorf("the example plugin's SHA-256 for the chart: %w", err)
	}
	edit := func(file string, edits ...func(string) string) error {
		p := filepath.Join(dir, file)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		s := string(data)
		for _, e := range edits {
			s = e(s)
		}
		return os.WriteFile(p, []byte(s), 0o644)
	}
	line := func(re *regexp.Regexp, repl string) func(string) string {
		return func(s string) string { return re.ReplaceAllString(s, repl) }
	}
	chartVersion := strings.TrimPrefix(set.Version, "v")
	if err := edit("Chart.yaml",
		line(reChartVersion, "version: "+chartVersion),
		line(reChartAppVersion, `appVersion: "`+set.Version+`"`)); err != nil {
		return nil, err
	}
	if err := edit("values.yaml",
		line(reImageTag, `${1}  tag: "`+set.Version+`"`),
		line(rePluginSHA256, `${1}    sha256: "`+sum+`"`)); err != nil {
		return nil, err
	}
	after, err := readChart(r.Root)
	if err != nil {
		return nil, err
	}
	want := chartState{Version: chartVersion, AppVersion: set.Version, Tag: set.Version, PluginSHA256: sum}
	if *after != want {
		return nil, fmt.Errorf("%s: after prepare the chart says %+v, want %+v: a line prepare rewrites moved (chart.go)", chartDir, *after, want)
	}
	var changes []Change
	for _, f := range []struct{ what, from, to string }{
		{"Chart.yaml version", before.Version, after.Version},
		{"Chart.yaml appVersion", before.AppVersion, after.AppVersion},
		{"values.yaml image.tag", before.Tag, after.Tag},
		{"values.yaml drivers." + chartPlugin.driver + ".sha256", before.PluginSHA256, after.PluginSHA256},
	} {
		if f.from != f.to {
			changes = append(changes, Change{Module: chartDir, Requires: f.what, From: f.from, To: f.to})
		}
	}
	return changes, nil
}

// buildPluginSHA256 builds chartPlugin as scripts/image does and returns
// the binary's SHA-256.
func buildPluginSHA256(root string) (string, error) {
	tmp, err := os.MkdirTemp("", "release-plugin-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "plugin")
	cmd := exec.CommandContext(context.Background(), "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-buildid= -w", "-o", bin, chartPlugin.pkg)
	cmd.Dir = filepath.Join(root, filepath.FromSlash(chartPlugin.module))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+chartPlugin.goarch, "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s in %s: %w\n%s", chartPlugin.pkg, chartPlugin.module, err, out)
	}
	f, err := os.Open(bin)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
