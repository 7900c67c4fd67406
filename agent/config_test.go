package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

const validFile = `
nodeName: node-from-file
stateDir: /var/lib/x
slices:
  syncDelay: 2s
plugins:
  drivers:
    - path: /opt/dranode/plugins/gpu-plugin
      sha256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
      args: ["--verbose"]
      config:
        driverName: gpu.example.com
        numDevices: 2
        nested:
          camelCase: true
`

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func flags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestConfigPrecedence(t *testing.T) {
	file := writeFile(t, validFile)
	tests := []struct {
		name     string
		args     []string
		env      []string
		wantNode string
		wantSync time.Duration
	}{
		{"file over default", []string{"--config", file}, nil, "node-from-file", 2 * time.Second},
		{"env over file", []string{"--config", file}, []string{"DRANODE_NODENAME=node-from-env", "DRANODE_SLICES_SYNCDELAY=3s"}, "node-from-env", 3 * time.Second},
		{"flag over env", []string{"--config", file, "--node-name", "node-from-flag", "--slices-sync-delay", "4s"}, []string{"DRANODE_NODENAME=node-from-env", "DRANODE_SLICES_SYNCDELAY=3s"}, "node-from-flag", 4 * time.Second},
		{"file from env", nil, []string{"DRANODE_CONFIG=" + file}, "node-from-file", 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := LoadConfig(flags(t, tt.args...), tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.NodeName != tt.wantNode || cfg.Slices.SyncDelay != tt.wantSync {
				t.Errorf("nodeName %q syncDelay %s, want %q %s", cfg.NodeName, cfg.Slices.SyncDelay, tt.wantNode, tt.wantSync)
			}
			// Untouched keys keep their defaults; derived paths follow stateDir.
			if cfg.CDI.Dir != "/var/run/cdi" || cfg.Slices.DryRunDir != "/var/lib/x/slices" || cfg.Claims.QPS != 50 {
				t.Errorf("defaults lost: cdi %q dryRun %q qps %v", cfg.CDI.Dir, cfg.Slices.DryRunDir, cfg.Claims.QPS)
			}
		})
	}
}

func TestConfigDriverSectionKeepsCase(t *testing.T) {
	cfg, err := LoadConfig(flags(t, "--config", writeFile(t, validFile)), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Plugins.Drivers[0]
	if d.Name != "gpu-plugin" || d.Args[0] != "--verbose" {
		t.Errorf("driver %+v", d)
	}
	if d.Config["driverName"] != "gpu.example.com" {
		t.Errorf("driver section keys changed: %v", d.Config)
	}
	nested, _ := d.Config["nested"].(map[string]any)
	if nested["camelCase"] != true {
		t.Errorf("nested keys changed: %v", d.Config["nested"])
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	drivers := `
plugins:
  drivers:
    - path: /bin/p
      sha256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
`
	tests := []struct {
		name, file string
		args, env  []string
		wantKey    string
	}{
		{name: "unknown top-level key", file: "nodeNmae: x\n" + drivers, wantKey: "nodenmae"},
		{name: "unknown nested key", file: "kubelet:\n  registyDir: /x\n" + drivers, wantKey: "registydir"},
		{name: "bad duration", file: "slices:\n  syncDelay: soon\n" + drivers, wantKey: "syncDelay"},
		{name: "negative duration", file: "slices:\n  syncDelay: -1s\n" + drivers, wantKey: "slices.syncDelay"},
		{name: "relative path", file: "cdi:\n  dir: run/cdi\n" + drivers, wantKey: "cdi.dir"},
		{name: "bad node name", file: "nodeName: Node_A\n" + drivers, wantKey: "nodeName"},
		{name: "no drivers", file: "nodeName: a\n", wantKey: "plugins.drivers"},
		{name: "bad digest", file: "plugins:\n  drivers:\n    - path: /bin/p\n      sha256: abc\n", wantKey: "plugins.drivers[0].sha256"},
		{name: "relative plugin path", file: "plugins:\n  drivers:\n    - path: p\n      sha256: \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"\n", wantKey: "plugins.drivers[0].path"},
		{name: "bad http address", file: drivers, args: []string{"--http-address", "8080"}, wantKey: "http.address"},
		{name: "bad qps from env", file: drivers, env: []string{"DRANODE_CLAIMS_QPS=fast"}, wantKey: "qps"},
		{name: "unknown env variable", file: drivers, env: []string{"DRANODE_NODE_NAME=x"}, wantKey: "DRANODE_NODE_NAME"},
		{name: "missing file", args: []string{"--config", "/nonexistent/agent.yaml"}, wantKey: "config"},
		{name: "not yaml", file: "nodeName: [\n", wantKey: "config"},
		{name: "memory limit not a quantity", file: "memoryLimit: lots\n" + drivers, wantKey: "memoryLimit"},
		{name: "memory limit too low", file: drivers, args: []string{"--memory-limit", "40Ki"}, wantKey: "memoryLimit"},
		{name: "memory limit negative", file: drivers, env: []string{"DRANODE_MEMORYLIMIT=-40Mi"}, wantKey: "memoryLimit"},
		{name: "pprof not a bool", file: "http:\n  pprof: sometimes\n" + drivers, wantKey: "pprof"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", writeFile(t, tt.file)}, args...)
			}
			_, err := LoadConfig(flags(t, args...), tt.env)
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v (%T), want a *ConfigError", err, err)
			}
			if !strings.Contains(strings.ToLower(ce.Key), strings.ToLower(tt.wantKey)) {
				t.Errorf("error names key %q (%v), want %q", ce.Key, err, tt.wantKey)
			}
		})
	}
}

func TestConfigYAMLRoundTrip(t *testing.T) {
	cfg, err := LoadConfig(flags(t, "--config", writeFile(t, validFile), "--http-address", "127.0.0.1:9000"), nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cfg.YAML()
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadConfig(flags(t, "--config", writeFile(t, string(out))), nil)
	if err != nil {
		t.Fatalf("printed configuration does not load: %v\n%s", err, out)
	}
	a, _ := cfg.YAML()
	b, _ := again.YAML()
	if string(a) != string(b) {
		t.Errorf("print, load, print differs:\n%s\n---\n%s", a, b)
	}
}

// The shipped example configurations must load (after the substitutions
// `make run` and the comments describe).
func TestExampleConfigsLoad(t *testing.T) {
	digest := strings.Repeat("ab", 32)
	for _, tt := range []struct{ file, replace string }{
		{"../examples/config/standalone.yaml", ""},
		{"../examples/config/gpu-plugin.yaml", ""},
	} {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			data, err := os.ReadFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			s := strings.NewReplacer("@RUN@", "/tmp/run", "@BIN@", "/tmp/bin", "@CLAIMS@", "/tmp/claims",
				"@GPU_SHA256@", digest, "<output of sha256sum>", digest).Replace(string(data))
			cfg, err := LoadConfig(flags(t, "--config", writeFile(t, s)), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Plugins.Drivers) != 1 || cfg.Plugins.Drivers[0].Config["driverName"] != "gpu.example.com" {
				t.Errorf("drivers: %+v", cfg.Plugins.Drivers)
			}
		})
	}
	// The sample claim decodes strictly and is allocated to the standalone node.
	c, err := ReadClaimFile("../examples/config/claims/gpu-claim.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Allocation == nil || !selectsNode(c.Status.Allocation, "dranode-dev") {
		t.Errorf("sample claim not allocated to dranode-dev: %+v", c.Status)
	}
}
