package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-viper/mapstructure/v2"
)

// driversKey is plugins.drivers, the one key that is a list of sections
// (Driver, whose fields are its schema); it is set in the file only.
type driversKey struct{}

func (driversKey) name() string        { return "plugins.drivers" }
func (driversKey) flagName() string    { return "" }
func (driversKey) usage() string       { return "driver plugins to run" }
func (driversKey) typeName() string    { return "list" }
func (driversKey) defaultText() string { return "" }
func (driversKey) docDefault() string  { return "—" }

func (driversKey) doc() string {
	return "list of `{name, path, sha256, args, config}`; `config` is the driver's own section, " +
		"handed to its `Configure` as JSON with keys as written"
}

func (driversKey) setDefault(c *Config) { c.Plugins.Drivers = nil }

func (k driversKey) decode(raw any, c *Config) error {
	var drivers []Driver
	d, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result:      &drivers,
		ErrorUnused: true,
		DecodeHook:  mapstructure.DecodeHookFuncValue(strictValue),
	})
	if err != nil {
		return err
	}
	if err := d.Decode(raw); err != nil {
		return decodeError(k.name(), err)
	}
	c.Plugins.Drivers = drivers
	return nil
}

// derive names a driver after its binary unless named.
func (driversKey) derive(c *Config) {
	for i, d := range c.Plugins.Drivers {
		if d.Name == "" && d.Path != "" {
			c.Plugins.Drivers[i].Name = filepath.Base(d.Path)
		}
	}
}

func (k driversKey) validate(c Config) error {
	bad := func(key, format string, args ...any) error {
		return &Error{Key: key, Reason: fmt.Sprintf(format, args...)}
	}
	if len(c.Plugins.Drivers) == 0 {
		return bad(k.name(), "at least one driver plugin is needed")
	}
	var names []string
	for i, d := range c.Plugins.Drivers {
		key := fmt.Sprintf("%s[%d]", k.name(), i)
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

// printed is the list; Config.YAML encodes it with Driver's json
// names, empty fields left out.
func (driversKey) printed(c Config) any { return c.Plugins.Drivers }

// decodeError turns the decoder's error into an *Error naming the first
// key it complains about, under key.
func decodeError(key string, err error) error {
	var de *mapstructure.DecodeError
	if !errors.As(err, &de) {
		return &Error{Key: key, Reason: err.Error(), Err: err}
	}
	name := key + de.Name()
	reason := de.Unwrap().Error()
	if keys, ok := strings.CutPrefix(reason, "has invalid keys: "); ok {
		// Only keys that did not come from the file can get here (those
		// are found as written by fileWalk), so lower case is all there is.
		var full []string
		for _, k := range strings.Split(keys, ", ") {
			full = append(full, name+"."+k)
		}
		return &Error{Key: strings.Join(full, ", "), Reason: "unknown key (keys are matched without case)"}
	}
	return &Error{Key: name, Reason: reason, Err: de.Unwrap()}
}
