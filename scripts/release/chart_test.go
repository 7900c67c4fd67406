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
	f["examples/go.mod"] = "module github.com/dranode/dranode/examples\n\ngo 1.26.0\n"
	f["examples/gpu/main.go"] = "package main\n\nfunc main() { println(\"gpu\") }\n"
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
`
	return f
}

func TestChartVersionCheckedAndPrepared(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, withChart())
	all := strings.Join(Check(openRepo(t, dir)), "\n")
	for _, w := range []string{
		chartDir + `/Chart.yaml version is "0.0.9", but versions.yaml releases agent (set "core") at v0.1.0; run: make release-prepare SET=core`,
		chartDir + `/Chart.yaml appVersion is "v0.0.9"`,
		chartDir + `/values.yaml image.tag is "v0.0.9"`,
		chartDir + `/values.yaml drivers.gpu.sha256 is "0000000000000000000000000000000000000000000000000000000000000000", not the plugin's SHA-256`,
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
		got = append(got, c.String())
	}
	t.Logf("changes:\n%s", strings.Join(got, "\n"))
	if len(got) != 4 {
		t.Errorf("%d changes, want 4 (version, appVersion, tag, sha256)", len(got))
	}
	if p := Check(openRepo(t, dir)); len(p) > 0 {
		t.Errorf("Check after prepare: %s", strings.Join(p, "\n"))
	}
	want, err := buildPluginSHA256(dir)
	if err != nil {
		t.Fatal(err)
	}
	values, err := os.ReadFile(filepath.Join(dir, chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`  # the release's` + "\n" + `  tag: "v0.1.0"`, "other:\n  tag: keep", `    sha256: "` + want + `"`, "      sha256: keep"} {
		if !strings.Contains(string(values), w) {
			t.Errorf("values.yaml after prepare lacks %q:\n%s", w, values)
		}
	}
	if again, err := Prepare(openRepo(t, dir), "core"); err != nil || len(again) != 0 {
		t.Errorf("second Prepare = %v, %v; want no change (the plugin build is reproducible)", again, err)
	}
}
