package node_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/dranode/dranode/scripts/image/workload"
)

// The operator's runbook, examples/deploy/README.md: its blocks marked
// <!-- runbook:NAME --> are the steps this harness follows, so that the
// page cannot say what the tests do not do.
const runbookFile = "../../examples/deploy/README.md"

// runbookBlock returns the fenced block after <!-- runbook:name -->, with
// shell line continuations joined.
func runbookBlock(t testing.TB, name string) []string {
	t.Helper()
	raw, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "<!-- runbook:"+name+" -->\n")
	if !ok {
		t.Fatalf("%s has no block marked runbook:%s", runbookFile, name)
	}
	if !strings.HasPrefix(rest, "```") {
		t.Fatalf("%s: runbook:%s is not followed by a fenced block", runbookFile, name)
	}
	_, rest, _ = strings.Cut(rest, "\n")
	body, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("%s: runbook:%s: unterminated block", runbookFile, name)
	}
	body = strings.ReplaceAll(body, "\\\n", " ")
	var lines []string
	for _, l := range strings.Split(body, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// runbookNamespaceLabels are the labels the runbook puts on the agent's
// namespace (kubectl label namespace <agentNS> k=v ...).
func runbookNamespaceLabels(t testing.TB) map[string]string {
	t.Helper()
	labels := map[string]string{}
	for _, l := range runbookBlock(t, "namespace") {
		f := strings.Fields(l)
		switch {
		case len(f) == 4 && f[0] == "kubectl" && f[1] == "create" && f[2] == "namespace" && f[3] == agentNS:
		case len(f) >= 5 && f[0] == "kubectl" && f[1] == "label" && f[2] == "namespace" && f[3] == agentNS:
			for _, kv := range f[4:] {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Fatalf("runbook:namespace: %q is not key=value", kv)
				}
				labels[k] = v
			}
		default:
			t.Fatalf("runbook:namespace: a step this harness does not follow: %s", l)
		}
	}
	if len(labels) == 0 {
		t.Fatal("runbook:namespace labels nothing")
	}
	return labels
}

// nodeSpecific are the values this harness sets because this node is not
// an operator's (see chartValues); the runbook may set only these, so that
// everything else is the chart's shipped values in both.
var nodeSpecific = map[string]bool{"image.repository": true}

// checkRunbookInstall holds the runbook's helm install to what deployChart
// does: release dranode, the chart, namespace agentNS, only node-specific
// --set values.
func checkRunbookInstall(t testing.TB) {
	t.Helper()
	lines := runbookBlock(t, "install")
	if len(lines) != 1 {
		t.Fatalf("runbook:install: want one helm install, got %q", lines)
	}
	f := strings.Fields(lines[0])
	if len(f) < 4 || f[0] != "helm" || f[1] != "install" || f[2] != "dranode" || f[3] != "examples/deploy/chart/dranode" {
		t.Fatalf("runbook:install: %s: want helm install dranode examples/deploy/chart/dranode ...", lines[0])
	}
	for i := 4; i < len(f); i++ {
		switch f[i] {
		case "--namespace", "-n":
			if i++; i >= len(f) || f[i] != agentNS {
				t.Errorf("runbook:install: namespace is not %s", agentNS)
			}
		case "--set":
			i++
			k, _, _ := strings.Cut(f[min(i, len(f)-1)], "=")
			if !nodeSpecific[k] {
				t.Errorf("runbook:install sets %s, which compat/node leaves as shipped: the test would not run what the runbook installs", k)
			}
		default:
			t.Errorf("runbook:install: flag %s this harness does not follow", f[i])
		}
	}
}

// checkRunbookPodOutput checks the sample pod's output the runbook promises
// against what the container really got (the workload image reports it in
// place of the sample's shell): the GPU's environment variable and its
// device node, /dev/gpu<n>, with the numbers the line shows.
func checkRunbookPodOutput(t testing.TB, r workload.Report) {
	t.Helper()
	lines := runbookBlock(t, "expect-pod")
	if len(lines) == 0 {
		t.Fatal("runbook:expect-pod is empty")
	}
	placeholder := strings.NewReplacer(regexp.QuoteMeta("<n>"), `([0-9]+)`, regexp.QuoteMeta("<uuid>"), `(\S+)`)
	for _, l := range lines {
		if strings.HasPrefix(l, "GPU_") {
			re := regexp.MustCompile("^" + placeholder.Replace(regexp.QuoteMeta(l)) + "$")
			found := false
			for _, kv := range r.Env {
				found = found || re.MatchString(kv.Name+"="+kv.Value)
			}
			if !found {
				t.Errorf("runbook:expect-pod promises %q; the container's environment has no such line: %v", l, r.Env)
			}
			continue
		}
		f := strings.Fields(l)
		if len(f) < 6 || !strings.HasPrefix(f[0], "c") {
			t.Errorf("runbook:expect-pod: %q is neither an environment line nor ls -l of a character device", l)
			continue
		}
		path := f[len(f)-1]
		re := regexp.MustCompile("^" + placeholder.Replace(regexp.QuoteMeta(path)) + "$")
		major, minor := strings.TrimSuffix(f[4], ","), f[5]
		found := false
		for _, d := range r.Devices {
			if re.MatchString(d.Path) && d.Type == workload.CharDevice && major == strconv.FormatUint(uint64(d.Major), 10) && minor == strconv.FormatUint(uint64(d.Minor), 10) {
				found = true
			}
		}
		if !found {
			t.Errorf("runbook:expect-pod promises %q; the container's device nodes: %+v", l, r.Devices)
		}
	}
}
