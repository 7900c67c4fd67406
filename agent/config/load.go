package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"sigs.k8s.io/yaml"
)

// Load merges, highest first: flags that were set, DRANODE_
// environment variables, the file named by --config (if any), and the
// defaults. Unknown keys in the file (named as the file spells them) and
// invalid values (quoted) are *ConfigErrors naming the key. A value is read
// the same from every source and never guessed at: a duration needs a unit
// ("30" is refused, not 30ns), a list key needs a list. fs may be nil (no
// flags); environ is os.Environ()-shaped.
func Load(fs *pflag.FlagSet, environ []string) (Config, error) {
	v := viper.New()
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
	doc, err := readConfigFile(v, file)
	if err != nil {
		return Config{}, err
	}
	if err := setEnvironment(v, env); err != nil {
		return Config{}, err
	}
	if fs != nil {
		setFlags(v, fs)
	}
	cfg := Default()
	for _, k := range configKeys {
		// Viper is given no defaults: a key no source sets (or the file
		// sets to null) keeps Default's value, already of its type.
		if raw := v.Get(k.name()); raw != nil {
			if err := k.decode(raw, &cfg); err != nil {
				return Config{}, err
			}
		}
	}
	if doc != nil {
		// Viper lower-cases every key, including those inside a driver's own
		// section; hand the driver its section as written.
		if err := restoreDriverSections(doc, &cfg); err != nil {
			return Config{}, err
		}
	}
	for _, k := range configKeys {
		k.derive(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// readConfigFile reads file (if named) into v and returns it as written, its
// keys checked against the declared ones: viper lower-cases every key, so
// they are looked at here, where they are still spelled as the user wrote
// them.
func readConfigFile(v *viper.Viper, file string) (doc any, err error) {
	if file == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, &Error{Key: "config", Reason: err.Error(), Err: err}
	}
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(raw)); err != nil {
		return nil, &Error{Key: "config", Reason: fmt.Sprintf("%s: %v", file, err), Err: err}
	}
	if doc, err = fileDocument(raw); err != nil {
		return nil, &Error{Key: "config", Reason: fmt.Sprintf("%s: %v", file, err), Err: err}
	}
	var w fileWalk
	w.section(doc, "", "")
	if len(w.unknown) > 0 {
		slices.Sort(w.unknown)
		return nil, &Error{Key: strings.Join(w.unknown, ", "), Reason: fmt.Sprintf("unknown key in %s (keys are matched without case)", file)}
	}
	if len(w.twice) > 0 {
		slices.SortFunc(w.twice, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
		return nil, &Error{Key: w.twice[0][0], Reason: fmt.Sprintf("written twice in %s, as %q and %q (keys are matched without case)", file, w.twice[0][0], w.twice[0][1])}
	}
	if w.shape != nil {
		return nil, w.shape
	}
	return doc, nil
}

// setEnvironment sets the keys DRANODE_ variables name. An unknown DRANODE_
// variable is reported, not ignored, so a typo does not silently fall back.
func setEnvironment(v *viper.Viper, env map[string]string) error {
	for name, val := range env {
		if name == EnvPrefix+"_CONFIG" {
			continue
		}
		var key configKey
		for _, k := range configKeys {
			// A key without a flag (a list) is set in the file only.
			if k.flagName() != "" && envName(k.name()) == name {
				key = k
			}
		}
		if key == nil {
			return &Error{Key: name, Reason: "unknown environment variable (keys are DRANODE_ + the key upper-cased, dots as underscores)"}
		}
		v.Set(key.name(), val)
	}
	return nil
}

// setFlags sets the keys of the flags that were set, as text: they are
// decoded like the file's values, so errors name the key the same way.
func setFlags(v *viper.Viper, fs *pflag.FlagSet) {
	for _, k := range configKeys {
		if fl := fs.Lookup(k.flagName()); k.flagName() != "" && fl != nil && fl.Changed {
			v.Set(k.name(), fl.Value.String())
		}
	}
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

// fileWalk finds in the file as written the keys that are not declared,
// the keys one mapping holds twice in different case (which one would win
// is chance), each with its path and spelled as written, and a section
// that is not a mapping (viper would read its keys as unset).
type fileWalk struct {
	unknown []string
	twice   [][2]string
	shape   *Error
}

// section walks mapping doc, the section whose declared name is prefix
// ("kubelet."), written as path. A key may be a dotted path
// ("slices.syncDelay: 1s").
func (w *fileWalk) section(doc any, prefix, path string) {
	m, ok := doc.(map[string]any)
	if !ok {
		if doc != nil && w.shape == nil {
			name := strings.TrimSuffix(path, ".")
			w.shape = &Error{Key: name, Reason: fmt.Sprintf("must be a mapping of keys to values, got %s", describe(reflect.ValueOf(doc)))}
		}
		return
	}
	seen := map[string]string{}
	for k, v := range m {
		if other, dup := seen[strings.ToLower(k)]; dup {
			pair := [2]string{path + other, path + k}
			slices.Sort(pair[:])
			w.twice = append(w.twice, pair)
		}
		seen[strings.ToLower(k)] = k
		name, rest, dotted := strings.Cut(k, ".")
		switch key, isKey := keyByName(prefix + name); {
		case isSection(prefix + name):
			if dotted {
				v = map[string]any{rest: v}
			}
			w.section(v, prefix+strings.ToLower(name)+".", path+name+".")
		case isKey && !dotted:
			if _, ok := key.(driversKey); ok {
				list, _ := v.([]any)
				for j, e := range list {
					w.driver(e, fmt.Sprintf("%s%s[%d].", path, name, j))
				}
			}
		default:
			w.unknown = append(w.unknown, path+k)
		}
	}
}

// driver walks one entry of plugins.drivers against Driver's fields.
// A driver's own section is the driver's: its keys are not looked at. A
// value of the wrong shape is left for the decoder to report.
func (w *fileWalk) driver(doc any, path string) {
	m, ok := doc.(map[string]any)
	if !ok {
		return
	}
	t := reflect.TypeFor[Driver]()
	seen := map[string]string{}
	for k := range m {
		if other, dup := seen[strings.ToLower(k)]; dup {
			pair := [2]string{path + other, path + k}
			slices.Sort(pair[:])
			w.twice = append(w.twice, pair)
		}
		seen[strings.ToLower(k)] = k
		if !slices.ContainsFunc(reflect.VisibleFields(t), func(f reflect.StructField) bool {
			return strings.EqualFold(f.Tag.Get("mapstructure"), k)
		}) {
			w.unknown = append(w.unknown, path+k)
		}
	}
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
			return &Error{Key: fmt.Sprintf("plugins.drivers[%d].config", i), Reason: fmt.Sprintf("must be a mapping, got %s", describe(reflect.ValueOf(section)))}
		}
		cfg.Plugins.Drivers[i].Config = m
	}
	return nil
}
