package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"sigs.k8s.io/yaml"
)

// EnvPrefix is the prefix of environment variables that set configuration
// keys: the key upper-cased with dots replaced by underscores, e.g.
// DRANODE_NODENAME, DRANODE_KUBELET_REGISTRYDIR, DRANODE_SLICES_SYNCDELAY.
const EnvPrefix = "DRANODE"

// ErrInvalidConfig is matched (errors.Is) by every configuration error; the
// error is a *ConfigError naming the key.
var ErrInvalidConfig = errors.New("invalid agent configuration")

// ConfigError names the configuration key that is wrong and why.
type ConfigError struct {
	Key    string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("configuration key %q: %s", e.Key, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidConfig) match.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Config is the agent's configuration. Keys in files, flags and environment
// variables are the mapstructure names below joined with dots.
type Config struct {
	// NodeName is the Kubernetes node this agent serves; default: the host
	// name.
	NodeName string `mapstructure:"nodeName" json:"nodeName"`
	// Kubeconfig selects cluster mode with this file. Empty: in-cluster
	// configuration when running in a pod, standalone mode otherwise.
	Kubeconfig string `mapstructure:"kubeconfig" json:"kubeconfig"`
	// StateDir holds the claim record (StateDir/claims.record) and, in
	// standalone mode, the dry-run slices.
	StateDir string `mapstructure:"stateDir" json:"stateDir"`
	// BootIDFile identifies the boot; a different content means the node
	// rebooted and every recorded claim must be prepared again.
	BootIDFile string        `mapstructure:"bootIDFile" json:"bootIDFile"`
	Kubelet    KubeletConfig `mapstructure:"kubelet" json:"kubelet"`
	CDI        CDIConfig     `mapstructure:"cdi" json:"cdi"`
	Plugins    PluginsConfig `mapstructure:"plugins" json:"plugins"`
	Slices     SlicesConfig  `mapstructure:"slices" json:"slices"`
	Claims     ClaimsConfig  `mapstructure:"claims" json:"claims"`
	HTTP       HTTPConfig    `mapstructure:"http" json:"http"`
	// ShutdownTimeout bounds the wait for calls in flight on SIGTERM.
	ShutdownTimeout time.Duration `mapstructure:"shutdownTimeout" json:"shutdownTimeout"`
	// MemoryLimit is the Go runtime's soft memory limit for the agent
	// process, a quantity ("40Mi"); "0" leaves the runtime's own setting
	// (the GOMEMLIMIT variable, or none). See ApplyMemoryLimit.
	MemoryLimit string `mapstructure:"memoryLimit" json:"memoryLimit"`
}

// KubeletConfig are the kubelet's plugin directories (under its --root-dir).
type KubeletConfig struct {
	// RegistryDir gets one registration socket per driver,
	// "<driver>-reg.sock".
	RegistryDir string `mapstructure:"registryDir" json:"registryDir"`
	// PluginsDir gets one DRA socket per driver, "<driver>/dra.sock".
	PluginsDir string `mapstructure:"pluginsDir" json:"pluginsDir"`
}

// CDIConfig is where the container runtime loads CDI specs from.
type CDIConfig struct {
	Dir string `mapstructure:"dir" json:"dir"`
}

// PluginsConfig lists the driver plugins to run.
type PluginsConfig struct {
	Drivers []DriverConfig `mapstructure:"drivers" json:"drivers"`
}

// DriverConfig is one driver plugin binary.
type DriverConfig struct {
	// Name identifies the plugin in logs and metrics; default: the binary's
	// base name. (The DRA driver name comes from the plugin itself.)
	Name string `mapstructure:"name" json:"name,omitempty"`
	// Path is the absolute path of the binary.
	Path string `mapstructure:"path" json:"path"`
	// SHA256 is the binary's hex digest, checked before every start.
	SHA256 string   `mapstructure:"sha256" json:"sha256"`
	Args   []string `mapstructure:"args" json:"args,omitempty"`
	// Config is the driver's own section, handed to its Configure as JSON
	// with its keys exactly as written in the file.
	Config map[string]any `mapstructure:"config" json:"config,omitempty"`
}

// SlicesConfig tunes ResourceSlice publishing.
type SlicesConfig struct {
	// SyncDelay coalesces inventory changes and slice events (a deleted
	// slice is put back after at most this delay plus one write).
	SyncDelay time.Duration `mapstructure:"syncDelay" json:"syncDelay"`
	// DryRunDir receives the slices as YAML in standalone mode; default
	// StateDir/slices.
	DryRunDir string `mapstructure:"dryRunDir" json:"dryRunDir"`
}

// ClaimsConfig is where ResourceClaims are read from.
type ClaimsConfig struct {
	// Dir holds ResourceClaim YAML files in standalone mode; default
	// StateDir/claims.
	Dir string `mapstructure:"dir" json:"dir"`
	// QPS and Burst limit the API client that reads claims on Prepare. The
	// kubelet prepares the claims of every pod starting on the node at
	// once: client-go's default (5/s, burst 10) would add about 200 ms per
	// claim beyond the tenth, so the defaults are 50/s with a burst of 100,
	// one GET per claim and driver call.
	QPS   float32 `mapstructure:"qps" json:"qps"`
	Burst int     `mapstructure:"burst" json:"burst"`
}

// HTTPConfig is the operations endpoint: /metrics, /healthz, /readyz.
type HTTPConfig struct {
	// Address to listen on ("host:port"); empty disables the endpoint.
	Address string `mapstructure:"address" json:"address"`
	// Pprof also serves Go's profiles under /debug/pprof/ (heap,
	// goroutines, CPU) for finding where memory or time goes. Off by
	// default: profiles show internals to whoever reaches the address.
	Pprof bool `mapstructure:"pprof" json:"pprof"`
}

// DefaultConfig returns the defaults (DESIGN.md, "Files on the node").
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		NodeName:   strings.ToLower(host),
		StateDir:   "/var/lib/dranode",
		BootIDFile: "/proc/sys/kernel/random/boot_id",
		Kubelet: KubeletConfig{
			RegistryDir: "/var/lib/kubelet/plugins_registry",
			PluginsDir:  "/var/lib/kubelet/plugins",
		},
		CDI:             CDIConfig{Dir: "/var/run/cdi"},
		Slices:          SlicesConfig{SyncDelay: 100 * time.Millisecond},
		Claims:          ClaimsConfig{QPS: 50, Burst: 100},
		HTTP:            HTTPConfig{Address: ":8085"},
		ShutdownTimeout: 30 * time.Second,
		MemoryLimit:     DefaultMemoryLimit,
	}
}

// flagKeys maps command-line flags to configuration keys.
var flagKeys = []struct{ flag, key, usage string }{
	{"node-name", "nodeName", "Kubernetes node name"},
	{"kubeconfig", "kubeconfig", "kubeconfig file (cluster mode); empty: in-cluster or standalone"},
	{"state-dir", "stateDir", "directory of the agent's durable state"},
	{"boot-id-file", "bootIDFile", "file whose content identifies the boot"},
	{"kubelet-registry-dir", "kubelet.registryDir", "kubelet plugin registration directory"},
	{"kubelet-plugins-dir", "kubelet.pluginsDir", "directory for the DRA sockets"},
	{"cdi-dir", "cdi.dir", "CDI spec directory of the container runtime"},
	{"slices-sync-delay", "slices.syncDelay", "coalescing delay for ResourceSlice writes"},
	{"slices-dry-run-dir", "slices.dryRunDir", "standalone mode: where ResourceSlices are written"},
	{"claims-dir", "claims.dir", "standalone mode: directory of ResourceClaim YAML files"},
	{"claims-qps", "claims.qps", "API client QPS for claim lookups"},
	{"claims-burst", "claims.burst", "API client burst for claim lookups"},
	{"http-address", "http.address", "address of /metrics, /healthz, /readyz; empty disables"},
	{"http-pprof", "http.pprof", "also serve /debug/pprof/ on http.address (true/false)"},
	{"shutdown-timeout", "shutdownTimeout", "wait for calls in flight on SIGTERM"},
	{"memory-limit", "memoryLimit", "Go soft memory limit of the agent process (\"40Mi\"); 0 keeps GOMEMLIMIT"},
}

// AddFlags registers one flag per scalar configuration key, plus --config.
// Flags are strings and parsed like the file's values, so errors name the
// key the same way.
func AddFlags(fs *pflag.FlagSet) {
	fs.String("config", "", "YAML configuration file")
	for _, f := range flagKeys {
		fs.String(f.flag, "", f.usage+" (key "+f.key+")")
	}
}

// LoadConfig merges, highest first: flags that were set, DRANODE_
// environment variables, the file named by --config (if any), and the
// defaults. Unknown keys in the file and invalid values are errors naming
// the key. fs may be nil (no flags); environ is os.Environ()-shaped.
func LoadConfig(fs *pflag.FlagSet, environ []string) (Config, error) {
	v := viper.New()
	def := DefaultConfig()
	setDefaults(v, def)
	env := map[string]string{}
	for _, kv := range environ {
		if k, val, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, EnvPrefix+"_") {
			env[k] = val
		}
	}
	var file string
	if fs != nil {
		file, _ = fs.GetString("config")
	}
	if file == "" {
		file = env[EnvPrefix+"_CONFIG"]
	}
	var raw []byte
	if file != "" {
		var err error
		raw, err = os.ReadFile(file)
		if err != nil {
			return Config{}, &ConfigError{Key: "config", Reason: err.Error()}
		}
		v.SetConfigType("yaml")
		if err := v.ReadConfig(bytes.NewReader(raw)); err != nil {
			return Config{}, &ConfigError{Key: "config", Reason: fmt.Sprintf("%s: %v", file, err)}
		}
	}
	// Environment variables of known keys only: an unknown DRANODE_ variable
	// is reported, not ignored, so a typo does not silently fall back.
	known := map[string]string{}
	for _, k := range v.AllKeys() {
		known[envName(k)] = k
	}
	for _, f := range flagKeys {
		known[envName(f.key)] = f.key
	}
	for name, val := range env {
		if name == EnvPrefix+"_CONFIG" {
			continue
		}
		key, ok := known[name]
		if !ok || key == "plugins.drivers" {
			return Config{}, &ConfigError{Key: name, Reason: "unknown environment variable (keys are DRANODE_ + the key upper-cased, dots as underscores)"}
		}
		v.Set(key, val)
	}
	if fs != nil {
		for _, f := range flagKeys {
			if fl := fs.Lookup(f.flag); fl != nil && fl.Changed {
				v.Set(f.key, fl.Value.String())
			}
		}
	}
	var cfg Config
	err := v.UnmarshalExact(&cfg, viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		mapstructure.StringToTimeDurationHookFunc(),
		mapstructure.StringToSliceHookFunc(","),
	)))
	if err != nil {
		return Config{}, decodeError(err)
	}
	if raw != nil {
		// Viper lower-cases every key, including those inside a driver's own
		// section; hand the driver its section as written.
		if err := restoreDriverSections(raw, &cfg); err != nil {
			return Config{}, err
		}
	}
	cfg.applyDerivedDefaults()
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func envName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

func setDefaults(v *viper.Viper, def Config) {
	v.SetDefault("nodeName", def.NodeName)
	v.SetDefault("kubeconfig", def.Kubeconfig)
	v.SetDefault("stateDir", def.StateDir)
	v.SetDefault("bootIDFile", def.BootIDFile)
	v.SetDefault("kubelet.registryDir", def.Kubelet.RegistryDir)
	v.SetDefault("kubelet.pluginsDir", def.Kubelet.PluginsDir)
	v.SetDefault("cdi.dir", def.CDI.Dir)
	v.SetDefault("plugins.drivers", []any{})
	v.SetDefault("slices.syncDelay", def.Slices.SyncDelay.String())
	v.SetDefault("slices.dryRunDir", "")
	v.SetDefault("claims.dir", "")
	v.SetDefault("claims.qps", def.Claims.QPS)
	v.SetDefault("claims.burst", def.Claims.Burst)
	v.SetDefault("http.address", def.HTTP.Address)
	v.SetDefault("http.pprof", def.HTTP.Pprof)
	v.SetDefault("shutdownTimeout", def.ShutdownTimeout.String())
	v.SetDefault("memoryLimit", def.MemoryLimit)
}

// decodeError turns mapstructure's message into a ConfigError naming the
// first key it complains about.
func decodeError(err error) error {
	msg := err.Error()
	var de *mapstructure.DecodeError
	if errors.As(err, &de) {
		reason := de.Unwrap().Error()
		if keys, ok := strings.CutPrefix(reason, "has invalid keys: "); ok {
			var full []string
			for _, k := range strings.Split(keys, ", ") {
				if de.Name() != "" {
					k = de.Name() + "." + k
				}
				full = append(full, k)
			}
			return &ConfigError{Key: strings.Join(full, ", "), Reason: "unknown key (keys are matched without case)"}
		}
		return &ConfigError{Key: de.Name(), Reason: reason}
	}
	if i := strings.Index(msg, "invalid keys: "); i >= 0 {
		return &ConfigError{Key: strings.TrimSpace(msg[i+len("invalid keys: "):]), Reason: "unknown key"}
	}
	if i := strings.Index(msg, "'"); i >= 0 {
		if j := strings.Index(msg[i+1:], "'"); j >= 0 {
			return &ConfigError{Key: msg[i+1 : i+1+j], Reason: msg}
		}
	}
	return &ConfigError{Key: "?", Reason: msg}
}

func restoreDriverSections(raw []byte, cfg *Config) error {
	var doc struct {
		Plugins struct {
			Drivers []struct {
				Config json.RawMessage `json:"config"`
			} `json:"drivers"`
		} `json:"plugins"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return &ConfigError{Key: "plugins.drivers", Reason: err.Error()}
	}
	if len(doc.Plugins.Drivers) != len(cfg.Plugins.Drivers) {
		return nil // drivers came from elsewhere; keep what viper decoded
	}
	for i, d := range doc.Plugins.Drivers {
		if len(d.Config) == 0 || string(d.Config) == "null" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(d.Config, &m); err != nil {
			return &ConfigError{Key: fmt.Sprintf("plugins.drivers[%d].config", i), Reason: "must be a mapping: " + err.Error()}
		}
		cfg.Plugins.Drivers[i].Config = m
	}
	return nil
}

func (c *Config) applyDerivedDefaults() {
	if c.Slices.DryRunDir == "" && c.StateDir != "" {
		c.Slices.DryRunDir = filepath.Join(c.StateDir, "slices")
	}
	if c.Claims.Dir == "" && c.StateDir != "" {
		c.Claims.Dir = filepath.Join(c.StateDir, "claims")
	}
	for i := range c.Plugins.Drivers {
		if c.Plugins.Drivers[i].Name == "" && c.Plugins.Drivers[i].Path != "" {
			c.Plugins.Drivers[i].Name = filepath.Base(c.Plugins.Drivers[i].Path)
		}
	}
}

// Validate reports the first invalid value, naming its key.
func (c Config) Validate() error {
	bad := func(key, format string, args ...any) error {
		return &ConfigError{Key: key, Reason: fmt.Sprintf(format, args...)}
	}
	if c.NodeName == "" {
		return bad("nodeName", "must be set (the host name could not be read)")
	}
	if !isDNSSubdomain(c.NodeName) {
		return bad("nodeName", "%q is not a DNS subdomain (lower case letters, digits, '-', '.')", c.NodeName)
	}
	for _, p := range []struct{ key, val string }{
		{"stateDir", c.StateDir}, {"bootIDFile", c.BootIDFile},
		{"kubelet.registryDir", c.Kubelet.RegistryDir}, {"kubelet.pluginsDir", c.Kubelet.PluginsDir},
		{"cdi.dir", c.CDI.Dir}, {"slices.dryRunDir", c.Slices.DryRunDir}, {"claims.dir", c.Claims.Dir},
	} {
		if p.val == "" {
			return bad(p.key, "must not be empty")
		}
		if !filepath.IsAbs(p.val) {
			return bad(p.key, "path %q must be absolute", p.val)
		}
	}
	if c.Slices.SyncDelay < 0 {
		return bad("slices.syncDelay", "must not be negative, got %s", c.Slices.SyncDelay)
	}
	if c.ShutdownTimeout <= 0 {
		return bad("shutdownTimeout", "must be positive, got %s", c.ShutdownTimeout)
	}
	if _, err := c.MemoryLimitBytes(); err != nil {
		return bad("memoryLimit", "%v", err)
	}
	if c.Claims.QPS <= 0 {
		return bad("claims.qps", "must be positive, got %v", c.Claims.QPS)
	}
	if c.Claims.Burst < 1 {
		return bad("claims.burst", "must be at least 1, got %d", c.Claims.Burst)
	}
	if c.HTTP.Address != "" {
		if _, _, err := net.SplitHostPort(c.HTTP.Address); err != nil {
			return bad("http.address", "%q is not host:port: %v", c.HTTP.Address, err)
		}
	}
	if len(c.Plugins.Drivers) == 0 {
		return bad("plugins.drivers", "at least one driver plugin is needed")
	}
	var names []string
	for i, d := range c.Plugins.Drivers {
		key := fmt.Sprintf("plugins.drivers[%d]", i)
		if d.Path == "" || !filepath.IsAbs(d.Path) {
			return bad(key+".path", "must be an absolute path, got %q", d.Path)
		}
		if len(d.SHA256) != 64 || strings.Trim(strings.ToLower(d.SHA256), "0123456789abcdef") != "" {
			return bad(key+".sha256", "must be 64 hex digits (sha256sum of the binary), got %q", d.SHA256)
		}
		if slices.Contains(names, d.Name) {
			return bad(key+".name", "%q is used by two drivers", d.Name)
		}
		names = append(names, d.Name)
	}
	return nil
}

func isDNSSubdomain(s string) bool {
	if len(s) > 253 || s == "" {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// YAML returns the configuration in the file format, for `config print`.
func (c Config) YAML() ([]byte, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	// Durations print as Go durations ("100ms"), the form the file takes.
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	m["shutdownTimeout"] = c.ShutdownTimeout.String()
	if s, ok := m["slices"].(map[string]any); ok {
		s["syncDelay"] = c.Slices.SyncDelay.String()
	}
	return yaml.Marshal(m)
}
