package pluginmgr_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/hashicorp/go-hclog"
	"k8s.io/klog/v2/textlogger"

	"github.com/dranode/dranode/pluginmgr"
)

// klogHost is a host logger in klog's text format at verbosity v, as the
// agent's, writing into buf.
func klogHost(buf *syncBuffer, v int) pluginmgr.Options {
	opts := quietOptions()
	opts.Logger = pluginmgr.LogrLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(buf), textlogger.Verbosity(v))))
	return opts
}

// linesMatching are the lines of log that match re.
func linesMatching(log, re string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if regexp.MustCompile(re).MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// A real plugin process logs through pluginmgr.Logger (hclog JSON on its
// stderr); the host re-emits each line once through its logr.Logger, in
// klog's format, attributed to the plugin, with level and fields.
func TestPluginLogsThroughLogr(t *testing.T) {
	for _, tc := range []struct {
		verbosity int
		// go-plugin's own progress and the plugin's debug line appear only
		// at high verbosity.
		wantNoise bool
	}{{0, false}, {5, true}} {
		var buf syncBuffer
		p := launch(t, testConfig(t, map[string]any{"devices": 5}), klogHost(&buf, tc.verbosity))
		if err := p.Close(); err != nil { // flushes the plugin's stderr
			t.Fatal(err)
		}
		log := buf.String()
		configured := linesMatching(log, `"configured"`)
		if len(configured) != 1 {
			t.Fatalf("V(%d): the plugin's Info line appears %d times, want once:\n%s", tc.verbosity, len(configured), log)
		}
		// klog text: I<date> <time> <pid> <file:line>] "msg" key=value ...
		want := regexp.MustCompile(`^I\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ \S+:\d+\] "configured" plugin="test" level="info" .*devices=5`)
		if !want.MatchString(configured[0]) || !strings.Contains(configured[0], `module="testdriver"`) || strings.Contains(configured[0], "timestamp") {
			t.Errorf("V(%d): plugin line = %q, want klog format with plugin, level, module and devices=5, no second timestamp", tc.verbosity, configured[0])
		}
		for _, noise := range []string{`"starting plugin"`, `"configuration details" plugin="test" level="debug"`, `"plugin address" plugin="test" level="debug" module="go-plugin"`} {
			if got := len(linesMatching(log, noise)) > 0; got != tc.wantNoise {
				t.Errorf("V(%d): %s logged = %v, want %v:\n%s", tc.verbosity, noise, got, tc.wantNoise, log)
			}
		}
		if strings.Contains(log, `"@level"`) || strings.Contains(log, "[INFO]") {
			t.Errorf("V(%d): JSON or hclog text reached the host log:\n%s", tc.verbosity, log)
		}
	}
}

// A panic is not JSON; it reaches the host's log as errors of the plugin.
func TestPluginPanicReachesLogr(t *testing.T) {
	var buf syncBuffer
	p := launch(t, testConfig(t, map[string]any{"panicIn": "Prepare"}), klogHost(&buf, 0))
	if _, err := p.Prepare(context.Background(), []pluginmgr.Claim{claimFor("a", "dev0")}); err == nil {
		t.Fatal("Prepare on a plugin that panics succeeded")
	}
	if err := p.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
	log := buf.String()
	lines := linesMatching(log, `^E.*"plugin output" plugin="test" level="error" stream="stderr" line="panic: testdriver: panic requested in Prepare`)
	if len(lines) != 1 {
		t.Errorf("the panic appears %d times as an error of plugin test, want once:\n%s", len(lines), log)
	}
	if len(linesMatching(log, `^E.*plugin="test".*line=".*goroutine \d+`)) == 0 {
		t.Errorf("the panic's stack trace is missing:\n%s", log)
	}
}

func TestLogrLoggerLevels(t *testing.T) {
	type call func(h hclog.Logger)
	for _, tc := range []struct {
		name string
		call call
		want string // the funcr line; "" for nothing logged
	}{
		{"info", func(h hclog.Logger) { h.Info("hello", "k", 1) }, `"level"=0 "msg"="hello" "plugin"="gpu" "level"="info" "k"=1`},
		{"warn is info with its level", func(h hclog.Logger) { h.Warn("careful") }, `"level"=0 "msg"="careful" "plugin"="gpu" "level"="warn"`},
		{"debug is V(4)", func(h hclog.Logger) { h.Debug("details") }, `"level"=4 "msg"="details" "plugin"="gpu" "level"="debug"`},
		{"trace is V(5), off at V(4)", func(h hclog.Logger) { h.Trace("noise") }, ``},
		{"error takes the error value", func(h hclog.Logger) { h.Error("failed", "error", "boom", "k", "v") }, `"msg"="failed" "error"="boom" "plugin"="gpu" "level"="error" "k"="v"`},
		{"error without an error value", func(h hclog.Logger) { h.Error("failed") }, `"msg"="failed" "error"=null "plugin"="gpu" "level"="error"`},
		{"With keeps its values", func(h hclog.Logger) { h.With("a", "b").Info("x", "c", "d") }, `"msg"="x" "plugin"="gpu" "level"="info" "a"="b" "c"="d"`},
		{"Named joins names", func(h hclog.Logger) { h.Named("sub").Info("x") }, `"msg"="x" "plugin"="gpu.sub" "level"="info"`},
		{"SetLevel raises the floor", func(h hclog.Logger) { h.SetLevel(hclog.Warn); h.Info("dropped") }, ``},
		{"Log with no level is Info", func(h hclog.Logger) { h.Log(hclog.NoLevel, "x") }, `"level"=0 "msg"="x" "plugin"="gpu" "level"="info"`},
		{"standard writer", func(h hclog.Logger) { h.StandardLogger(nil).Print("from log") }, `"msg"="from log" "plugin"="gpu" "level"="info"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lines []string
			log := funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 4})
			tc.call(pluginmgr.LogrLogger(log).Named("gpu"))
			switch {
			case tc.want == "" && len(lines) != 0:
				t.Errorf("logged %q, want nothing", lines)
			case tc.want != "" && (len(lines) != 1 || !strings.Contains(lines[0], tc.want)):
				t.Errorf("logged %q, want one line containing %s", lines, tc.want)
			}
		})
	}
}

func TestLogrLoggerLevelFollowsVerbosity(t *testing.T) {
	for v, want := range map[int]hclog.Level{0: hclog.Info, 4: hclog.Debug, 5: hclog.Trace} {
		h := pluginmgr.LogrLogger(funcr.New(func(_, _ string) {}, funcr.Options{Verbosity: v}))
		if got := h.GetLevel(); got != want || h.IsDebug() != (v >= 4) {
			t.Errorf("V(%d): GetLevel = %v, IsDebug = %v; want %v", v, got, h.IsDebug(), want)
		}
	}
}
