package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
			cfg, err := Load(flags(t, tt.args...), tt.env)
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
	cfg, err := Load(flags(t, "--config", writeFile(t, validFile)), nil)
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
		{name: "taint effect not the API's", file: "slices:\n  unhealthyTaintEffect: PreferNoSchedule\n" + drivers, wantKey: "slices.unhealthyTaintEffect"},
		{name: "taint effect in the wrong case", file: drivers, env: []string{"DRANODE_SLICES_UNHEALTHYTAINTEFFECT=noschedule"}, wantKey: "slices.unhealthyTaintEffect"},
		{name: "taint effect empty", file: drivers, args: []string{"--slices-unhealthy-taint-effect", ""}, wantKey: "slices.unhealthyTaintEffect"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", writeFile(t, tt.file)}, args...)
			}
			_, err := Load(flags(t, args...), tt.env)
			var ce *Error
			if !errors.As(err, &ce) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v (%T), want a *Error", err, err)
			}
			if !strings.Contains(strings.ToLower(ce.Key), strings.ToLower(tt.wantKey)) {
				t.Errorf("error names key %q (%v), want %q", ce.Key, err, tt.wantKey)
			}
		})
	}
}

func TestConfigYAMLRoundTrip(t *testing.T) {
	cfg, err := Load(flags(t, "--config", writeFile(t, validFile), "--http-address", "127.0.0.1:9000"), nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cfg.YAML()
	if err != nil {
		t.Fatal(err)
	}
	again, err := Load(flags(t, "--config", writeFile(t, string(out))), nil)
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
	for _, tt := range []struct {
		file    string
		drivers []string
	}{
		{"../../examples/config/standalone.yaml", []string{"gpu.example.com", "loop.example.com"}},
		{"../../examples/config/gpu-plugin.yaml", []string{"gpu.example.com"}},
		{"../../examples/config/loop-plugin.yaml", []string{"loop.example.com"}},
	} {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			data, err := os.ReadFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			s := strings.NewReplacer("@RUN@", "/tmp/run", "@BIN@", "/tmp/bin", "@CLAIMS@", "/tmp/claims",
				"@GPU_SHA256@", digest, "@LOOP_SHA256@", digest, "<output of sha256sum>", digest).Replace(string(data))
			cfg, err := Load(flags(t, "--config", writeFile(t, s)), nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, d := range cfg.Plugins.Drivers {
				names = append(names, fmt.Sprint(d.Config["driverName"]))
			}
			if !slices.Equal(names, tt.drivers) {
				t.Errorf("drivers: %+v, want driver names %v", cfg.Plugins.Drivers, tt.drivers)
			}
		})
	}
}

// durationKeys lists every duration key, found in the declarations, so a
// duration key added later is tested too.
func durationKeys() []string {
	var keys []string
	for _, k := range configKeys {
		if k.typeName() == "duration" {
			keys = append(keys, k.name())
		}
	}
	return keys
}

// yamlFor writes key: value as nested YAML mappings.
func yamlFor(key, value string) string {
	parts := strings.Split(key, ".")
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(strings.Repeat("  ", i) + p + ":")
		if i < len(parts)-1 {
			b.WriteString("\n")
		}
	}
	return b.String() + " " + value + "\n"
}

func flagFor(t *testing.T, key string) string {
	t.Helper()
	if k, ok := keyByName(key); ok && k.flagName() != "" {
		return k.flagName()
	}
	t.Fatalf("no flag for key %s", key)
	return ""
}

// A duration without a unit is refused from every source, with the key and
// the value; YAML used to read `30` as 30ns.
func TestConfigDurationNeedsUnit(t *testing.T) {
	const drivers = "plugins:\n  drivers:\n    - path: /bin/p\n      sha256: \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"\n"
	keys := durationKeys()
	if len(keys) < 2 {
		t.Fatalf("duration keys %v: expected at least shutdownTimeout and slices.syncDelay", keys)
	}
	for _, key := range keys {
		for _, value := range []string{"30", "100", "1.5", "-7"} {
			for _, src := range []string{"yaml", "yaml-quoted", "env", "flag"} {
				t.Run(key+"/"+value+"/"+src, func(t *testing.T) {
					file, args, env := drivers, []string(nil), []string(nil)
					switch src {
					case "yaml":
						file += yamlFor(key, value)
					case "yaml-quoted":
						file += yamlFor(key, `"`+value+`"`)
					case "env":
						env = []string{envName(key) + "=" + value}
					case "flag":
						args = []string{"--" + flagFor(t, key), value}
					}
					cfg, err := Load(flags(t, append([]string{"--config", writeFile(t, file)}, args...)...), env)
					var ce *Error
					if !errors.As(err, &ce) {
						t.Fatalf("loaded %s=%s without a unit: shutdownTimeout %v, syncDelay %v (err %v)", key, value, cfg.ShutdownTimeout, cfg.Slices.SyncDelay, err)
					}
					if ce.Key != key || !strings.Contains(err.Error(), `"`+value+`"`) || !strings.Contains(err.Error(), "unit") {
						t.Errorf("error %q: want key %q, the value %q quoted and the missing unit named", err, key, value)
					}
				})
			}
		}
	}
	// Zero needs no unit (time.ParseDuration agrees), from any source.
	for _, src := range [][]string{{"file"}, {"env"}} {
		file, env := drivers, []string(nil)
		if src[0] == "file" {
			file += yamlFor("slices.syncDelay", "0")
		} else {
			env = []string{"DRANODE_SLICES_SYNCDELAY=0"}
		}
		cfg, err := Load(flags(t, "--config", writeFile(t, file)), env)
		if err != nil || cfg.Slices.SyncDelay != 0 {
			t.Errorf("syncDelay 0 from %s: %v, %v", src[0], cfg.Slices.SyncDelay, err)
		}
	}
}

// A list key given a single value is refused, not turned into a list.
func TestConfigListKeyRefusesScalar(t *testing.T) {
	const digest = "\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\""
	for _, tt := range []struct{ name, file, wantKey, wantValue string }{
		{"args quoted string", "plugins:\n  drivers:\n    - path: /bin/p\n      sha256: " + digest + "\n      args: \"--foo\"\n", "plugins.drivers[0].args", `"--foo"`},
		{"args plain string", "plugins:\n  drivers:\n    - path: /bin/p\n      sha256: " + digest + "\n      args: --foo,--bar\n", "plugins.drivers[0].args", `"--foo,--bar"`},
		{"args number", "plugins:\n  drivers:\n    - path: /bin/p\n      sha256: " + digest + "\n      args: 3\n", "plugins.drivers[0].args", "3"},
		{"drivers a mapping", "plugins:\n  drivers:\n    path: /bin/p\n    sha256: " + digest + "\n", "plugins.drivers", "mapping"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Load(flags(t, "--config", writeFile(t, tt.file)), nil)
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("accepted: %+v (err %v)", cfg.Plugins.Drivers, err)
			}
			if ce.Key != tt.wantKey || !strings.Contains(ce.Reason, tt.wantValue) || !strings.Contains(ce.Reason, "list") {
				t.Errorf("error %q: want key %q and a reason naming a list and %s", err, tt.wantKey, tt.wantValue)
			}
		})
	}
}

// Unknown keys are reported as the file spells them, all of them.
func TestConfigUnknownKeysAsWritten(t *testing.T) {
	const drivers = "plugins:\n  drivers:\n    - path: /bin/p\n      sha256: \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"\n"
	for _, tt := range []struct{ name, file, wantKey string }{
		{"top level", "nodeNmae: x\n" + drivers, "nodeNmae"},
		{"nested", "kubelet:\n  registyDir: /x\n" + drivers, "kubelet.registyDir"},
		{"parent in other case", "Kubelet:\n  RegistyDir: /x\n" + drivers, "Kubelet.RegistyDir"},
		{"in a driver", "plugins:\n  drivers:\n    - path: /bin/p\n      sha256: \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"\n      Argz: [a]\n", "plugins.drivers[0].Argz"},
		{"two, sorted", "zKey: 1\naKey: 2\n" + drivers, "aKey, zKey"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(flags(t, "--config", writeFile(t, tt.file)), nil)
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v, want a *Error", err)
			}
			if ce.Key != tt.wantKey || !strings.Contains(ce.Reason, "unknown") {
				t.Errorf("error %q names key %q, want %q", err, ce.Key, tt.wantKey)
			}
		})
	}
	// One key written twice in different case: which would win is chance.
	_, err := Load(flags(t, "--config", writeFile(t, "nodeName: a\nkubelet:\n  pluginsDir: /a\n  PluginsDir: /b\n"+drivers)), nil)
	var ce *Error
	if !errors.As(err, &ce) || ce.Key != "kubelet.PluginsDir" || !strings.Contains(ce.Reason, `"kubelet.pluginsDir"`) {
		t.Errorf("key written twice: %v", err)
	}
	// Keys still match without case, a key may be a dotted path, and the
	// driver's own section is the driver's business.
	cfg, err := Load(flags(t, "--config", writeFile(t, "NodeName: n\nSLICES:\n  SyncDelay: 1s\nkubelet.pluginsDir: /p\n"+
		"plugins:\n  drivers:\n    - path: /bin/p\n      sha256: \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"\n      config: {anyKey: 1, Nested: {x: y}}\n")), nil)
	if err != nil {
		t.Fatalf("keys in another case, dotted or in a driver's section refused: %v", err)
	}
	if cfg.NodeName != "n" || cfg.Slices.SyncDelay != time.Second || cfg.Kubelet.PluginsDir != "/p" {
		t.Errorf("keys in another case or dotted not applied: %+v", cfg)
	}
}

// A value that does not parse is quoted in the error, whatever its source.
func TestConfigParseErrorQuotesValue(t *testing.T) {
	const drivers = "plugins:\n  drivers:\n    - path: /bin/p\n      sha256: \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"\n"
	for _, tt := range []struct {
		name, file       string
		args, env        []string
		wantKey, wantVal string
	}{
		{name: "qps from env", env: []string{"DRANODE_CLAIMS_QPS=fast"}, wantKey: "claims.qps", wantVal: `"fast"`},
		{name: "qps in file", file: "claims:\n  qps: fast\n", wantKey: "claims.qps", wantVal: `"fast"`},
		{name: "burst from flag", args: []string{"--claims-burst", "1.5"}, wantKey: "claims.burst", wantVal: `"1.5"`},
		{name: "burst in file", file: "claims:\n  burst: many\n", wantKey: "claims.burst", wantVal: `"many"`},
		{name: "burst fraction in file", file: "claims:\n  burst: 1.5\n", wantKey: "claims.burst", wantVal: "1.5"},
		{name: "pprof in file", file: "http:\n  pprof: sometimes\n", wantKey: "http.pprof", wantVal: `"sometimes"`},
		{name: "pprof from env", env: []string{"DRANODE_HTTP_PPROF=yes please"}, wantKey: "http.pprof", wantVal: `"yes please"`},
		{name: "duration garbage", file: "shutdownTimeout: soon\n", wantKey: "shutdownTimeout", wantVal: `"soon"`},
		{name: "a mapping for a string", file: "nodeName: {a: b}\n", wantKey: "nodeName", wantVal: "mapping"},
		{name: "port out of range", args: []string{"--http-address", ":99999"}, wantKey: "http.address", wantVal: `":99999"`},
		{name: "negative port", file: "http:\n  address: \"127.0.0.1:-1\"\n", wantKey: "http.address", wantVal: `"127.0.0.1:-1"`},
		{name: "port 65536", env: []string{"DRANODE_HTTP_ADDRESS=[::1]:65536"}, wantKey: "http.address", wantVal: `"[::1]:65536"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--config", writeFile(t, tt.file+drivers)}, tt.args...)
			_, err := Load(flags(t, args...), tt.env)
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v, want a *Error", err)
			}
			if ce.Key != tt.wantKey || !strings.Contains(ce.Reason, tt.wantVal) {
				t.Errorf("error %q: want key %q and %s in the reason", err, tt.wantKey, tt.wantVal)
			}
		})
	}
	for _, addr := range []string{":0", "127.0.0.1:65535", "[::1]:8085", ""} {
		if _, err := Load(flags(t, "--config", writeFile(t, drivers), "--http-address", addr), nil); err != nil {
			t.Errorf("http.address %q refused: %v", addr, err)
		}
	}
}
