package agent

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"k8s.io/klog/v2/textlogger"
)

// With no PluginLogger, a plugin's own log lines (gpu-plugin's JSON on its
// stderr) come out of the agent's logger in its format, once, with the
// plugin's name and level and their fields.
func TestPluginLinesInAgentLog(t *testing.T) {
	e := newTestEnv(t, "gpu.example.com")
	var buf syncBuffer
	a, err := New(e.cfg, Options{Logger: textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&buf)))})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(); err != nil { // waits for the plugin, whose stderr is then read to its end
		t.Fatal(err)
	}
	log := buf.String()
	want := regexp.MustCompile(`^I\d{4} [0-9:.]+ +\d+ \S+\] "configured" node="node-a" plugin="gpu0" level="info" module="gpu" .*devices=4 .*driver="gpu.example.com"`)
	var found int
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"configured"`) {
			found++
			if !want.MatchString(line) {
				t.Errorf("plugin line %q, want it in klog format with node, plugin, level, module and its fields", line)
			}
		}
		if strings.Contains(line, `"@level"`) || strings.HasPrefix(line, "{") {
			t.Errorf("JSON in the agent's log: %q", line)
		}
	}
	if found != 1 {
		t.Errorf("gpu-plugin's \"configured\" line appears %d times, want once:\n%s", found, log)
	}
}
