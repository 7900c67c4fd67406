package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// withChart adds to the fixture an agent module in set core (v0.1.0), a
// chart shaped like the real one at the previous release, and a tiny
// examples/gpu plugin that prepare really builds.
func withChart() map[string]string {
	f := fixture()
	f["go.work"] = strings.Replace(f["go.work"], "./app\n", "./app\n\t./agent\n", 1)
	f["versions.yaml"] = strings.Replace(f["versions.yaml"], "[a, b]", "[a, b, agent]", 1)
	f["agent/go.mod"] = "module github.com/dranode/dranode/agent\n\ngo 1.26.0\n"
	f["agent/agent.go"] = "// Package agent is a fixture.\npackage agent\n"
	f["agent/README.md"] = "# agent\n\n## Licence\n\nApache-2.0.\n"
	f["agent/"+notesFile] = "# Release notes\n\n## v0.1.0\n\nFirst release.\n"
	f["examples/go.mod"] = "module github.com/dranode/dranode/examples\n\ngo 1.26.0\n"
	f["examples/gpu/main.go"] = "package main\n\nfunc main() { println(\"gpu\") }\n"
	f["examples/loop/cmd/loop-plugin/main.go"] = "package main\n\nfunc main() { println(\"loop\") }\n"
	f[chartDir+"/Chart.yaml"] = "apiVersion: v2\nname: dranode\nversion: 0.0.9\nappVersion: \"v0.0.9\"\n"
	f[chartDir+"/values.yaml"] = `# the image
image:
  repository: example.com/dranode-agent
  # the release's
  tag: "v0.0.9"
  pullPolicy: IfNotPresent
other:
  tag: keep
drivers:
  gpu:
    path: /opt/dranode/plugins/gpu-plugin
    # of the binary
    sha256: "0000000000000000000000000000000000000000000000000000000000000000"
    config:
      sha256: keep
  loop:
    enabled: false
    sha256: "0000000000000000000000000000000000000000000000000000000000000000"
`
	return f
}

func TestChartVersionCheckedAndPrepared(t *testing.T) {
	dir := t.TempDir()
	initRepo(t, dir, withChart())
	all := strings.Join(Check(openRepo(t, dir)), "\n")
	for _, w := range []string{
		chartDir + `/Chart.yaml version is "0.0.9", but versions.yaml releases agent (set "core") at v0.1.0; run: make release-prepare SET=core`,
		chartDir + `/Chart.yaml appVersion is "v0.0.9"`,
		chartDir + `/values.yaml image.tag is "v0.0.9"`,
		chartDir + `/values.yaml drivers.gpu.sha256 is "0000000000000000000000000000000000000000000000000000000000000000", not the plugin's SHA-256`,
		chartDir + `/values.yaml drivers.loop.sha256 is "0000000000000000000000000000000000000000000000000000000000000000", not the plugin's SHA-256`,
	} {
		if !strings.Contains(all, w) {
			t.Errorf("want a problem containing\n\t%s\ngot:\n%s", w, all)
		}
	}

	changes, err := Prepare(openRepo(t, dir), "core")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		if c.Module == chartDir {
			got = append(got, c.String())
		}
	}
	t.Logf("changes:\n%s", strings.Join(got, "\n"))
	if len(got) != 5 {
		t.Errorf("%d changes, want 5 (version, appVersion, tag, two sha256)", len(got))
	}
	if p := Check(openRepo(t, dir)); len(p) > 0 {
		t.Errorf("Check after prepare: %s", strings.Join(p, "\n"))
	}
	sums, err := buildPluginSums(dir)
	if err != nil {
		t.Fatal(err)
	}
	if sums["gpu"] == sums["loop"] {
		t.Errorf("gpu and loop plugins have one SHA-256 %s: one was built twice", sums["gpu"])
	}
	values, err := os.ReadFile(filepath.Join(dir, chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`  # the release's` + "\n" + `  tag: "v0.1.0"`, "other:\n  tag: keep", "  gpu:\n    path: /opt/dranode/plugins/gpu-plugin\n    # of the binary\n    sha256: \"" + sums["gpu"] + `"`, "      sha256: keep", "  loop:\n    enabled: false\n    sha256: \"" + sums["loop"] + `"`} {
		if !strings.Contains(string(values), w) {
			t.Errorf("values.yaml after prepare lacks %q:\n%s", w, values)
		}
	}
	if again, err := Prepare(openRepo(t, dir), "core"); err != nil || len(again) != 0 {
		t.Errorf("second Prepare = %v, %v; want no change (the plugin build is reproducible)", again, err)
	}
}

// TestChartPluginsMatchTheValues: a driver in the chart that prepare does
// not build, or a plugin it builds that the chart lacks, is a problem.
func TestChartPluginsMatchTheValues(t *testing.T) {
	files := withChart()
	sum := strings.Repeat("ab", 32)
	files[chartDir+"/values.yaml"] = strings.NewReplacer(`"0000000000000000000000000000000000000000000000000000000000000000"`, `"`+sum+`"`, "  loop:\n", "  disk:\n").Replace(files[chartDir+"/values.yaml"])
	dir := t.TempDir()
	writeTree(t, dir, files)
	all := strings.Join(Check(openRepo(t, dir)), "\n")
	for _, w := range []string{
		chartDir + "/values.yaml has no drivers.loop, a plugin the image ships",
		chartDir + "/values.yaml names drivers.disk, which prepare does not build",
	} {
		if !strings.Contains(all, w) {
			t.Errorf("want a problem containing\n\t%s\ngot:\n%s", w, all)
		}
	}
	if strings.Contains(all, "drivers.gpu") {
		t.Errorf("a problem with drivers.gpu, whose SHA-256 is set:\n%s", all)
	}
}
