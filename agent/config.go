package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/dranode/dranode/inventory"
)

// claimRecordDir is the claim record's directory in stateDir.
const claimRecordDir = "claims.record"

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
	// Err is the underlying error, if any (a *fs.PathError for a path the
	// agent cannot use), for errors.Is and errors.As; Reason already says
	// what it says.
	Err error
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("configuration key %q: %s", e.Key, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidConfig) match.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Unwrap returns Err.
func (e *ConfigError) Unwrap() error { return e.Err }

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
	Cleanup    CleanupConfig `mapstructure:"cleanup" json:"cleanup"`
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
	// DRAManagerState is the kubelet's own checkpoint of the claims it
	// prepared ("dra_manager_state" in its root directory). The agent
	// only reads it: to reconcile a damaged record (a claim whose last
	// state the damage hid is kept while the kubelet lists it; a missing
	// file is read as "the kubelet lists nothing"), and to find leftover
	// claims (see CleanupConfig; a missing file stops the sweep).
	DRAManagerState string `mapstructure:"draManagerState" json:"draManagerState"`
	// InstanceID names this agent instance among the instances of one
	// node during a rolling (maxSurge) upgrade: the pod UID, from the
	// downward API. Set, the sockets are "<driver>-<id>-reg.sock" and
	// "<driver>/dra-<id>.sock" (the names of the upstream kubeletplugin
	// helper's RollingUpdate option), and the claim record is handed over
	// between instances (see DESIGN.md, "Seamless upgrades"). Empty: "<driver>-reg.sock" and
	// "<driver>/dra.sock", one instance at a time.
	InstanceID string `mapstructure:"instanceID" json:"instanceID"`
	// HandoverTimeout bounds how long a starting instance waits for the
	// claim record held by another instance.
	HandoverTimeout time.Duration `mapstructure:"handoverTimeout" json:"handoverTimeout"`
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
	// UnhealthyTaintEffect is the effect of the taint a device the plugin
	// reports unhealthy gets in the published slices (key
	// "<driver>/unhealthy", inventory.HealthTaintKey): NoSchedule (default:
	// no new allocations), NoExecute (also evicts the pods using it, where
	// the cluster runs the device taint eviction controller) or None (only
	// shows it).
	UnhealthyTaintEffect string `mapstructure:"unhealthyTaintEffect" json:"unhealthyTaintEffect"`
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

// CleanupConfig tunes the sweep of leftover claims: recorded claims that
// the kubelet's DRA checkpoint (kubelet.draManagerState) does not list and
// whose ResourceClaim is deleted, recreated under another UID or reserved
// for no pod. They are unprepared through their plugins and removed once
// they have been leftovers for GracePeriod. A claim the kubelet lists is
// never touched; when its checkpoint cannot be read, nothing is.
type CleanupConfig struct {
	// Interval between sweeps (the first runs at start); "0s" disables
	// the sweep.
	Interval time.Duration `mapstructure:"interval" json:"interval"`
	// GracePeriod an entry must have been a leftover, in every sweep
	// since it was first seen as one, before it is cleaned. It is
	// counted in memory: a restart starts it afresh.
	GracePeriod time.Duration `mapstructure:"gracePeriod" json:"gracePeriod"`
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
			// The kubelet's --root-dir, where its DRA manager keeps its
			// checkpoint (kubeletcompat.DRAManagerStateFile).
			DRAManagerState: "/var/lib/kubelet/dra_manager_state",
			HandoverTimeout: 2 * time.Minute,
		},
		CDI:             CDIConfig{Dir: "/var/run/cdi"},
		Slices:          SlicesConfig{SyncDelay: 100 * time.Millisecond, UnhealthyTaintEffect: string(resourceapi.DeviceTaintEffectNoSchedule)},
		Claims:          ClaimsConfig{QPS: 50, Burst: 100},
		HTTP:            HTTPConfig{Address: ":8085"},
		Cleanup:         CleanupConfig{Interval: time.Minute, GracePeriod: 10 * time.Minute},
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
	{"kubelet-dra-manager-state", "kubelet.draManagerState", "the kubelet's DRA checkpoint (read to reconcile claims a damaged record left uncertain)"},
	{"kubelet-instance-id", "kubelet.instanceID", "this instance's ID for rolling upgrades (the pod UID); empty: one instance per node"},
	{"kubelet-handover-timeout", "kubelet.handoverTimeout", "how long a starting instance waits for the claim record held by another instance"},
	{"cdi-dir", "cdi.dir", "CDI spec directory of the container runtime"},
	{"slices-sync-delay", "slices.syncDelay", "coalescing delay for ResourceSlice writes"},
	{"slices-dry-run-dir", "slices.dryRunDir", "standalone mode: where ResourceSlices are written"},
	{"slices-unhealthy-taint-effect", "slices.unhealthyTaintEffect", "effect of the taint on devices the plugin reports unhealthy: NoSchedule, NoExecute or None"},
	{"claims-dir", "claims.dir", "standalone mode: directory of ResourceClaim YAML files"},
	{"claims-qps", "claims.qps", "API client QPS for claim lookups"},
	{"claims-burst", "claims.burst", "API client burst for claim lookups"},
	{"http-address", "http.address", "address of /metrics, /healthz, /readyz; empty disables"},
	{"http-pprof", "http.pprof", "also serve /debug/pprof/ on http.address (true/false)"},
	{"cleanup-interval", "cleanup.interval", "interval between sweeps for leftover claims; 0s disables"},
	{"cleanup-grace-period", "cleanup.gracePeriod", "how long a claim must be a leftover before it is unprepared and removed"},
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
// defaults. Unknown keys in the file (named as the file spells them) and
// invalid values (quoted) are *ConfigErrors naming the key. A value is read
// the same from every source and never guessed at: a duration needs a unit
// ("30" is refused, not 30ns), a list key needs a list. fs may be nil (no
// flags); environ is os.Environ()-shaped.
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
	var doc any // the file as written: keys in their own case
	if file != "" {
		raw, err := os.ReadFile(file)
		if err != nil {
			return Config{}, &ConfigError{Key: "config", Reason: err.Error(), Err: err}
		}
		v.SetConfigType("yaml")
		if err := v.ReadConfig(bytes.NewReader(raw)); err != nil {
			return Config{}, &ConfigError{Key: "config", Reason: fmt.Sprintf("%s: %v", file, err), Err: err}
		}
		if doc, err = fileDocument(raw); err != nil {
			return Config{}, &ConfigError{Key: "config", Reason: fmt.Sprintf("%s: %v", file, err), Err: err}
		}
		// Viper lower-cases every key: look at them here, where they are
		// still spelled as the user wrote them.
		unknown, twice := checkFileKeys(doc, reflect.TypeFor[Config](), "")
		if len(unknown) > 0 {
			slices.Sort(unknown)
			return Config{}, &ConfigError{Key: strings.Join(unknown, ", "), Reason: "unknown key (keys are matched without case)"}
		}
		if len(twice) > 0 {
			slices.SortFunc(twice, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
			return Config{}, &ConfigError{Key: twice[0][0], Reason: fmt.Sprintf("written twice, as %q and %q (keys are matched without case)", twice[0][0], twice[0][1])}
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
	err := v.UnmarshalExact(&cfg, viper.DecodeHook(mapstructure.DecodeHookFuncValue(strictValue)),
		func(c *mapstructure.DecoderConfig) { c.WeaklyTypedInput = false })
	if err != nil {
		return Config{}, decodeError(err)
	}
	if doc != nil {
		// Viper lower-cases every key, including those inside a driver's own
		// section; hand the driver its section as written.
		if err := restoreDriverSections(doc, &cfg); err != nil {
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
	v.SetDefault("kubelet.draManagerState", def.Kubelet.DRAManagerState)
	v.SetDefault("kubelet.instanceID", "")
	v.SetDefault("kubelet.handoverTimeout", def.Kubelet.HandoverTimeout.String())
	v.SetDefault("cdi.dir", def.CDI.Dir)
	v.SetDefault("plugins.drivers", []any{})
	v.SetDefault("slices.syncDelay", def.Slices.SyncDelay.String())
	v.SetDefault("slices.dryRunDir", "")
	v.SetDefault("slices.unhealthyTaintEffect", def.Slices.UnhealthyTaintEffect)
	v.SetDefault("claims.dir", "")
	v.SetDefault("claims.qps", def.Claims.QPS)
	v.SetDefault("claims.burst", def.Claims.Burst)
	v.SetDefault("http.address", def.HTTP.Address)
	v.SetDefault("http.pprof", def.HTTP.Pprof)
	v.SetDefault("cleanup.interval", def.Cleanup.Interval.String())
	v.SetDefault("cleanup.gracePeriod", def.Cleanup.GracePeriod.String())
	v.SetDefault("shutdownTimeout", def.ShutdownTimeout.String())
	v.SetDefault("memoryLimit", def.MemoryLimit)
}

// decodeError turns the decoder's error into a ConfigError naming the first
// key it complains about.
func decodeError(err error) error {
	var de *mapstructure.DecodeError
	if !errors.As(err, &de) {
		return &ConfigError{Key: "?", Reason: err.Error(), Err: err}
	}
	reason := de.Unwrap().Error()
	if keys, ok := strings.CutPrefix(reason, "has invalid keys: "); ok {
		// Only keys that did not come from the file can get here (those
		// are found as written by checkFileKeys), so lower case is all there is.
		var full []string
		for _, k := range strings.Split(keys, ", ") {
			if de.Name() != "" {
				k = de.Name() + "." + k
			}
			full = append(full, k)
		}
		return &ConfigError{Key: strings.Join(full, ", "), Reason: "unknown key (keys are matched without case)"}
	}
	return &ConfigError{Key: de.Name(), Reason: reason, Err: de.Unwrap()}
}

var durationType = reflect.TypeFor[time.Duration]()

// strictValue converts a value from the file, an environment variable or a
// flag to the type of its key, or says why it cannot, quoting the value. It
// guesses nothing: a number without a unit is not a duration (the file would
// otherwise read 30 as 30ns where the variable and the flag refuse "30"), a
// single value is not a list, a fraction is not a whole number.
func strictValue(from, to reflect.Value) (any, error) {
	v := from.Interface()
	switch to.Kind() {
	case reflect.Int64:
		if to.Type() != durationType {
			break
		}
		s, ok := scalarString(from)
		if !ok {
			return nil, fmt.Errorf("must be a duration with a unit (\"30s\", \"100ms\"), got %s", describe(from))
		}
		d, err := time.ParseDuration(s)
		if err == nil {
			return d, nil
		}
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return nil, fmt.Errorf("%q has no unit: write it with one, as in %q or %q", s, s+"s", s+"ms")
		}
		return nil, fmt.Errorf("%q is not a duration (a number with a unit: \"30s\", \"100ms\", \"1m30s\")", s)
	case reflect.Slice:
		if k := from.Kind(); k != reflect.Slice && k != reflect.Array {
			return nil, fmt.Errorf("must be a list (as in [\"a\", \"b\"]), got %s", describe(from))
		}
	case reflect.Struct, reflect.Map:
		if from.Kind() != reflect.Map {
			return nil, fmt.Errorf("must be a mapping of keys to values, got %s", describe(from))
		}
	case reflect.String:
		// A number is a string where a string is wanted (nodeName: 123).
		if s, ok := scalarString(from); ok {
			return s, nil
		}
		return nil, fmt.Errorf("must be a string, got %s", describe(from))
	case reflect.Bool:
		switch x := v.(type) {
		case bool:
			return x, nil
		case string:
			if b, err := strconv.ParseBool(x); err == nil {
				return b, nil
			}
		}
		return nil, fmt.Errorf("must be true or false, got %s", describe(from))
	case reflect.Int:
		if s, ok := scalarString(from); ok {
			if n, err := strconv.Atoi(s); err == nil {
				return n, nil
			}
		}
		return nil, fmt.Errorf("must be a whole number, got %s", describe(from))
	case reflect.Float32:
		if s, ok := scalarString(from); ok {
			if f, err := strconv.ParseFloat(s, 32); err == nil {
				return float32(f), nil
			}
		}
		return nil, fmt.Errorf("must be a number, got %s", describe(from))
	}
	return v, nil
}

// scalarString is a string, number or boolean as text, as written.
func scalarString(v reflect.Value) (string, bool) {
	switch v.Kind() {
	case reflect.String:
		return v.String(), true
	case reflect.Bool:
		return strconv.FormatBool(v.Bool()), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10), true
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'f', -1, 64), true
	}
	return "", false
}

// describe names a value for an error: strings quoted, collections by kind.
func describe(v reflect.Value) string {
	switch v.Kind() {
	case reflect.String:
		return strconv.Quote(v.String())
	case reflect.Map:
		return "a mapping"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	if s, ok := scalarString(v); ok {
		return s
	}
	return v.Type().String()
}

// fileDocument is the configuration file as generic values, keys as written.
func fileDocument(raw []byte) (any, error) {
	data, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// lookupKey finds key in a mapping the way the configuration does: without
// case.
func lookupKey(m map[string]any, key string) (any, bool) {
	for k, v := range m {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return nil, false
}

// checkFileKeys finds in doc, the file as written, the keys that t (Config
// or one of its sections) does not have, and the keys one mapping holds twice
// in different case (which one would win is chance), each with its path and
// spelled as written. A key may be a dotted path ("slices.syncDelay: 1s"). A
// driver's own section is the driver's: its keys are not looked at. A value of
// the wrong shape is left for the decoder to report.
func checkFileKeys(doc any, t reflect.Type, path string) (unknown []string, twice [][2]string) {
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, nil
	}
	seen := map[string]string{}
	for k, v := range m {
		if other, dup := seen[strings.ToLower(k)]; dup {
			pair := [2]string{path + other, path + k}
			slices.Sort(pair[:])
			twice = append(twice, pair)
		}
		seen[strings.ToLower(k)] = k
		name, rest, dotted := strings.Cut(k, ".")
		f, ok := fieldForKey(t, name)
		if !ok {
			unknown = append(unknown, path+k)
			continue
		}
		if dotted {
			v = map[string]any{rest: v}
		}
		switch ft := f.Type; {
		case ft.Kind() == reflect.Struct:
			u, tw := checkFileKeys(v, ft, path+name+".")
			unknown, twice = append(unknown, u...), append(twice, tw...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			list, _ := v.([]any)
			for j, e := range list {
				u, tw := checkFileKeys(e, ft.Elem(), fmt.Sprintf("%s%s[%d].", path, name, j))
				unknown, twice = append(unknown, u...), append(twice, tw...)
			}
		}
	}
	return unknown, twice
}

// fieldForKey is the field of struct type t that key names, without case.
func fieldForKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); strings.EqualFold(f.Tag.Get("mapstructure"), key) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// restoreDriverSections replaces each driver's section with the one in doc,
// the file as written: viper lower-cases every key, including those inside
// a driver's own section.
func restoreDriverSections(doc any, cfg *Config) error {
	root, _ := doc.(map[string]any)
	plugins, _ := lookupKey(root, "plugins")
	pm, _ := plugins.(map[string]any)
	drivers, _ := lookupKey(pm, "drivers")
	list, _ := drivers.([]any)
	if len(list) != len(cfg.Plugins.Drivers) {
		return nil // drivers came from elsewhere; keep what viper decoded
	}
	for i, d := range list {
		dm, _ := d.(map[string]any)
		section, _ := lookupKey(dm, "config")
		if section == nil {
			continue
		}
		m, ok := section.(map[string]any)
		if !ok {
			return &ConfigError{Key: fmt.Sprintf("plugins.drivers[%d].config", i), Reason: fmt.Sprintf("must be a mapping, got %s", describe(reflect.ValueOf(section)))}
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
		{"kubelet.draManagerState", c.Kubelet.DRAManagerState},
		{"cdi.dir", c.CDI.Dir}, {"slices.dryRunDir", c.Slices.DryRunDir}, {"claims.dir", c.Claims.Dir},
	} {
		if p.val == "" {
			return bad(p.key, "must not be empty")
		}
		if !filepath.IsAbs(p.val) {
			return bad(p.key, "path %q must be absolute", p.val)
		}
	}
	if id := c.Kubelet.InstanceID; id != "" && !validInstanceID(id) {
		return bad("kubelet.instanceID", "%q: only letters, digits, '-', '_' and '.', at most 63 characters (a pod UID fits)", id)
	}
	if c.Kubelet.HandoverTimeout <= 0 {
		return bad("kubelet.handoverTimeout", "must be positive, got %s", c.Kubelet.HandoverTimeout)
	}
	if c.Slices.SyncDelay < 0 {
		return bad("slices.syncDelay", "must not be negative, got %s", c.Slices.SyncDelay)
	}
	if err := inventory.ValidateTaintEffect(resourceapi.DeviceTaintEffect(c.Slices.UnhealthyTaintEffect)); err != nil {
		return bad("slices.unhealthyTaintEffect", "%q: must be NoSchedule, NoExecute or None (as written: the API's effects are case-sensitive)", c.Slices.UnhealthyTaintEffect)
	}
	if c.Cleanup.Interval < 0 {
		return bad("cleanup.interval", "must not be negative (\"0s\" disables the sweep), got %s", c.Cleanup.Interval)
	}
	if c.Cleanup.GracePeriod <= 0 {
		return bad("cleanup.gracePeriod", "must be positive, got %s", c.Cleanup.GracePeriod)
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
		_, port, err := net.SplitHostPort(c.HTTP.Address)
		if err != nil {
			return bad("http.address", "%q is not host:port: %v", c.HTTP.Address, err)
		}
		// What net.Listen accepts: a number up to 65535 or a service name
		// (from /etc/services, never the network).
		if _, err := net.LookupPort("tcp", port); err != nil {
			return bad("http.address", "%q: port %q is not a port number (0 to 65535) or a known service name", c.HTTP.Address, port)
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

// The access(2) modes CheckNode asks about.
const (
	accessRead   = 0x4
	accessWrite  = 0x2
	accessSearch = 0x1
)

// CheckNode checks cfg against the machine it runs on, as far as that can be
// done without the API server and without creating or changing anything: what
// the agent would refuse at start, or fail on the first time it used the
// path. bootIDFile is a readable regular file that is not empty; kubeconfig
// loads (in a pod without one, the in-cluster configuration); stateDir, the
// kubelet directories, cdi.dir and, in standalone mode, slices.dryRunDir are
// directories the process can write, or can create (the nearest existing
// parent is a directory it can write); a claim record already in stateDir is
// a writable directory; claims.dir, if it exists in standalone mode, is a
// readable directory; http.address's host, if an IP address, is one of this
// machine's. The plugin binaries are CheckPluginBinaries's.
//
// It returns the checks it could not make, one line each naming the key
// ("kubeconfig: whether the API server ... answers ..."), and an error
// joining one *ConfigError per key that failed (or Validate's error).
func CheckNode(cfg Config) (notChecked []string, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var errs []error
	fail := func(key string, err error) {
		errs = append(errs, &ConfigError{Key: key, Reason: err.Error(), Err: err})
	}
	skip := func(format string, args ...any) {
		notChecked = append(notChecked, fmt.Sprintf(format, args...))
	}

	if err := checkBootIDFile(cfg.BootIDFile); err != nil {
		fail("bootIDFile", err)
	}
	// The mode, chosen as Start chooses it.
	standalone := false
	switch {
	case cfg.Kubeconfig != "":
		if rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig); err != nil {
			fail("kubeconfig", err)
		} else {
			skip("kubeconfig: whether the API server %s answers and accepts the credentials (needs the API server)", rc.Host)
		}
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		if rc, err := rest.InClusterConfig(); err != nil {
			fail("kubeconfig", fmt.Errorf("empty, and the in-cluster configuration cannot be used: %w", err))
		} else {
			skip("kubeconfig: empty, in-cluster: whether the API server %s answers and accepts the service account (needs the API server)", rc.Host)
		}
	default:
		standalone = true
	}

	dirs := []struct{ key, path string }{
		{"stateDir", cfg.StateDir},
		{"kubelet.registryDir", cfg.Kubelet.RegistryDir},
		{"kubelet.pluginsDir", cfg.Kubelet.PluginsDir},
		{"cdi.dir", cfg.CDI.Dir},
	}
	if standalone {
		dirs = append(dirs, struct{ key, path string }{"slices.dryRunDir", cfg.Slices.DryRunDir})
	}
	for _, d := range dirs {
		checked, err := checkWritableDir(d.path)
		switch {
		case err != nil:
			fail(d.key, err)
		case !checked:
			skip("%s: whether %s is writable (not asked on %s)", d.key, d.path, runtime.GOOS)
		case d.key == "stateDir":
			// The claim record, if there is one already.
			record := filepath.Join(cfg.StateDir, claimRecordDir)
			if _, err := os.Lstat(record); err == nil {
				if _, err := checkWritableDir(record); err != nil {
					fail(d.key, fmt.Errorf("the claim record: %w", err))
				}
			}
		}
	}
	if standalone {
		if fi, err := os.Stat(cfg.Claims.Dir); err == nil {
			if !fi.IsDir() {
				fail("claims.dir", fmt.Errorf("%s is not a directory", cfg.Claims.Dir))
			} else if _, err := canAccess(cfg.Claims.Dir, accessRead|accessSearch); err != nil {
				fail("claims.dir", fmt.Errorf("%s is not readable (%w)", cfg.Claims.Dir, err))
			}
		}
	}

	if cfg.HTTP.Address != "" {
		host, port, _ := net.SplitHostPort(cfg.HTTP.Address) // Validate checked it
		if ip := net.ParseIP(host); ip != nil {
			if !ip.IsUnspecified() && !ip.IsLoopback() && !isLocalAddress(ip) {
				fail("http.address", fmt.Errorf("%s is not an address of this machine", host))
			}
		} else if host != "" {
			skip("http.address: whether %q names an address of this machine (needs name resolution)", host)
		}
		if port != "" && port != "0" {
			skip("http.address: whether port %s is free (an agent running now holds it)", port)
		}
	}
	skip("plugins.drivers: whether each plugin starts and answers (needs running it)")
	return notChecked, errors.Join(errs...)
}

// checkBootIDFile fails where Start's reading of the boot ID would, without
// reading more than a boot ID's worth (or blocking on a FIFO).
func checkBootIDFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(data)) == "" {
		return fmt.Errorf("%s is empty", path)
	}
	return nil
}

// checkWritableDir reports whether the process could create dir, as
// os.MkdirAll does, and write in it, without creating anything: dir is a
// directory it can write and search, or dir's nearest existing parent is.
// checked is false where the platform cannot be asked.
func checkWritableDir(dir string) (checked bool, err error) {
	for p := dir; ; {
		fi, err := os.Stat(p)
		if err == nil {
			what := p + " is"
			if p != dir {
				what = fmt.Sprintf("%s cannot be created: %s is", dir, p)
			}
			if !fi.IsDir() {
				return true, fmt.Errorf("%s not a directory", what)
			}
			checked, err := canAccess(p, accessWrite|accessSearch)
			if err != nil {
				return true, fmt.Errorf("%s not writable (%w)", what, err)
			}
			return checked, nil
		}
		if errors.Is(err, fs.ErrPermission) {
			return true, err
		}
		// Missing, or under a file: look at the parent.
		parent := filepath.Dir(p)
		if parent == p {
			return true, err
		}
		p = parent
	}
}

func isLocalAddress(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell; Start will
	}
	return slices.ContainsFunc(addrs, func(a net.Addr) bool {
		n, ok := a.(*net.IPNet)
		return ok && n.IP.Equal(ip)
	})
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

// validInstanceID accepts what goes into a socket file name unchanged: a
// pod UID, or any short name without path separators.
func validInstanceID(s string) bool {
	if len(s) > 63 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return s != "." && s != ".."
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
	if s, ok := m["kubelet"].(map[string]any); ok {
		s["handoverTimeout"] = c.Kubelet.HandoverTimeout.String()
	}
	if s, ok := m["cleanup"].(map[string]any); ok {
		s["interval"] = c.Cleanup.Interval.String()
		s["gracePeriod"] = c.Cleanup.GracePeriod.String()
	}
	return yaml.Marshal(m)
}
