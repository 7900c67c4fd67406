package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
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

// chartPlugins are the driver plugins the agent's image ships and the
// chart's values name (drivers.<driver>), each built as scripts/image builds
// it into the image (images/spec.go there: the same module, package and
// flags): "make image" is reproducible, so the digest of this build is the
// digest in the released image, for the same Go toolchain. linux/amd64 is
// the platform the values describe; another platform's digest is
// "scripts/image digests" away. "check" fails when the chart names a
// driver this list lacks, or the reverse.
var chartPlugins = []chartPlugin{
	{driver: "gpu", module: "examples", pkg: "./gpu"},
	{driver: "loop", module: "examples", pkg: "./loop/cmd/loop-plugin"},
}

type chartPlugin struct{ driver, module, pkg string }

// chartPluginArch is the GOARCH of the plugins whose SHA-256 the chart
// carries.
const chartPluginArch = "amd64"

// chartState is what the chart says about versions.
type chartState struct {
	Version, AppVersion, Tag string
	// PluginSHA256 is drivers.<driver>.sha256 of values.yaml, by driver.
	PluginSHA256 map[string]string
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
	sums := map[string]string{}
	for driver, d := range v.Drivers {
		sums[driver] = d.SHA256
	}
	return &chartState{Version: c.Version, AppVersion: c.AppVersion, Tag: v.Image.Tag, PluginSHA256: sums}, nil
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
	built := map[string]bool{}
	for _, p := range chartPlugins {
		built[p.driver] = true
		if _, ok := c.PluginSHA256[p.driver]; !ok {
			problems = append(problems, fmt.Sprintf("%s/values.yaml has no drivers.%s, a plugin the image ships; add its entry, or remove it from chartPlugins (scripts/release/chart.go)", chartDir, p.driver))
		}
	}
	for _, driver := range slices.Sorted(maps.Keys(c.PluginSHA256)) {
		sum := c.PluginSHA256[driver]
		switch {
		case !built[driver]:
			problems = append(problems, fmt.Sprintf("%s/values.yaml names drivers.%s, which prepare does not build; add it to chartPlugins (scripts/release/chart.go) as scripts/image builds it", chartDir, driver))
		case !isSHA256(sum) || strings.Trim(sum, "0") == "":
			problems = append(problems, fmt.Sprintf("%s/values.yaml drivers.%s.sha256 is %q, not the plugin's SHA-256: the agent would refuse the plugin; run: make release-prepare SET=%s",
				chartDir, driver, sum, setName))
		}
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
)

// rePluginSHA256 finds drivers.<driver>.sha256 in values.yaml.
func rePluginSHA256(driver string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^(  ` + regexp.QuoteMeta(driver) + `:\n(?:    .*\n|\s*#.*\n)*?)    sha256:.*$`)
}

// prepareChart writes the set's version into the chart and the SHA-256 of
// each of chartPlugins (pluginSums, by driver) into its values, when the
// set holds chartModule.
func prepareChart(r *Repo, setName string, pluginSums func(root string) (map[string]string, error)) ([]Change, error) {
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
	sums, err := pluginSums(r.Root)
	if err != nil {
		return nil, fmt.Errorf("the plugins' SHA-256 for the chart: %w", err)
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
	values := []func(string) string{line(reImageTag, `${1}  tag: "`+set.Version+`"`)}
	want := chartState{Version: chartVersion, AppVersion: set.Version, Tag: set.Version, PluginSHA256: maps.Clone(before.PluginSHA256)}
	for _, driver := range slices.Sorted(maps.Keys(sums)) {
		if _, ok := before.PluginSHA256[driver]; !ok {
			continue // reported by check
		}
		values = append(values, line(rePluginSHA256(driver), `${1}    sha256: "`+sums[driver]+`"`))
		want.PluginSHA256[driver] = sums[driver]
	}
	if err := edit("values.yaml", values...); err != nil {
		return nil, err
	}
	after, err := readChart(r.Root)
	if err != nil {
		return nil, err
	}
	if !reflect.DeepEqual(*after, want) {
		return nil, fmt.Errorf("%s: after prepare the chart says %+v, want %+v: a line prepare rewrites moved (chart.go)", chartDir, *after, want)
	}
	fields := []struct{ what, from, to string }{
		{"Chart.yaml version", before.Version, after.Version},
		{"Chart.yaml appVersion", before.AppVersion, after.AppVersion},
		{"values.yaml image.tag", before.Tag, after.Tag},
	}
	for _, driver := range slices.Sorted(maps.Keys(after.PluginSHA256)) {
		fields = append(fields, struct{ what, from, to string }{"values.yaml drivers." + driver + ".sha256", before.PluginSHA256[driver], after.PluginSHA256[driver]})
	}
	var changes []Change
	for _, f := range fields {
		if f.from != f.to {
			changes = append(changes, Change{Module: chartDir, Requires: f.what, From: f.from, To: f.to})
		}
	}
	return changes, nil
}

// buildPluginSums builds each of chartPlugins for linux/chartPluginArch as
// scripts/image does and returns the binaries' SHA-256 by driver.
func buildPluginSums(root string) (map[string]string, error) {
	tmp, err := os.MkdirTemp("", "release-plugin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	sums := map[string]string{}
	for _, p := range chartPlugins {
		bin := filepath.Join(tmp, p.driver)
		cmd := exec.CommandContext(context.Background(), "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-buildid= -w", "-o", bin, p.pkg)
		cmd.Dir = filepath.Join(root, filepath.FromSlash(p.module))
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+chartPluginArch, "GOWORK=off", "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s in %s: %w\n%s", p.pkg, p.module, err, out)
		}
		if sums[p.driver], err = fileSHA256(bin); err != nil {
			return nil, err
		}
	}
	return sums, nil
}

func fileSHA256(file string) (string, error) {
	f, err := os.Open(file)
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
