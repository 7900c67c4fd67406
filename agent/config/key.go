package config

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"time"
)

// configKey is what every configuration key is made of. Each key is declared
// once, in configKeys; its default, flag, environment variable, decoding,
// validation, printing and README row all come from that declaration.
type configKey interface {
	// name is the key as written in the file, a dotted path
	// ("slices.syncDelay"); keys match it without case.
	name() string
	// flagName is the command-line flag; "" for a key set in the file only.
	flagName() string
	// usage is the flag's help: one line, plain text.
	usage() string
	// doc is the key's README row's "what" (Markdown).
	doc() string
	// typeName names the value's type in --help and the README.
	typeName() string
	// defaultText is the default as --help shows it; docDefault as the
	// README shows it (which may name a rule instead of this machine's value).
	defaultText() string
	docDefault() string
	setDefault(c *Config)
	// decode sets the key in c from raw, a value from viper (file,
	// environment or flag), or says why it cannot.
	decode(raw any, c *Config) error
	// derive fills a value left empty from other keys.
	derive(c *Config)
	// validate says why the value in c is wrong, or returns nil.
	validate(c Config) error
	// printed is the value as the file takes it, for Config.YAML.
	printed(c Config) any
}

// setting is a key holding one value of type T (string, bool, int,
// float32 or time.Duration).
type setting[T any] struct {
	key, flag, help string
	markdown        string // README "what"; help when empty
	typ             string // "" names T
	def             func() T
	docDef          string // README default when not def()'s text
	field           func(*Config) *T
	check           func(T) error        // nil: any T
	fill            func(c Config) T     // derive: the value when left empty
	show            func(T) string       // defaultText; fmt's %v when nil
	print           func(T) any          // printed; the value itself when nil
	extra           func(c Config) error // a check that needs other keys
}

func (s *setting[T]) name() string     { return s.key }
func (s *setting[T]) flagName() string { return s.flag }
func (s *setting[T]) usage() string    { return s.help }

func (s *setting[T]) doc() string {
	if s.markdown != "" {
		return s.markdown
	}
	return s.help
}

func (s *setting[T]) typeName() string {
	if s.typ != "" {
		return s.typ
	}
	switch any(*new(T)).(type) {
	case time.Duration:
		return "duration"
	case float32:
		return "float"
	}
	return reflect.TypeFor[T]().String()
}

func (s *setting[T]) defaultText() string {
	if s.show != nil {
		return s.show(s.def())
	}
	return fmt.Sprint(s.def())
}

func (s *setting[T]) docDefault() string {
	if s.docDef != "" {
		return s.docDef
	}
	if t := s.defaultText(); t != "" {
		return "`" + t + "`"
	}
	return "empty"
}

func (s *setting[T]) setDefault(c *Config) { *s.field(c) = s.def() }

func (s *setting[T]) decode(raw any, c *Config) error {
	v, err := strictValue(reflect.ValueOf(raw), reflect.ValueOf(s.field(c)).Elem())
	if err != nil {
		return &Error{Key: s.key, Reason: err.Error(), Err: err}
	}
	*s.field(c) = v.(T)
	return nil
}

func (s *setting[T]) derive(c *Config) {
	if s.fill != nil && reflect.ValueOf(*s.field(c)).IsZero() {
		*s.field(c) = s.fill(*c)
	}
}

func (s *setting[T]) validate(c Config) error {
	if s.check != nil {
		if err := s.check(*s.field(&c)); err != nil {
			return &Error{Key: s.key, Reason: err.Error()}
		}
	}
	if s.extra != nil {
		return s.extra(c)
	}
	return nil
}

func (s *setting[T]) printed(c Config) any {
	v := *s.field(&c)
	if s.print != nil {
		return s.print(v)
	}
	return v
}

// The kinds of key, by what their values are.

func stringKey(key, flag, help string, def string, field func(*Config) *string) *setting[string] {
	return &setting[string]{key: key, flag: flag, help: help, def: func() string { return def }, field: field}
}

// pathKey is a key naming an absolute path.
func pathKey(key, flag, help string, def string, field func(*Config) *string) *setting[string] {
	s := stringKey(key, flag, help, def, field)
	s.typ = "path"
	s.check = absolutePath
	return s
}

func durationKey(key, flag, help string, def time.Duration, field func(*Config) *time.Duration) *setting[time.Duration] {
	return &setting[time.Duration]{key: key, flag: flag, help: help, def: func() time.Duration { return def }, field: field,
		show: shortDuration, print: func(d time.Duration) any { return d.String() }}
}

// shortDuration writes a duration as people do: "1m", not "1m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func absolutePath(p string) error {
	if p == "" {
		return fmt.Errorf("must not be empty")
	}
	if !filepath.IsAbs(p) {
		return fmt.Errorf("path %q must be absolute", p)
	}
	return nil
}

func positive(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("must be positive, got %s", d)
	}
	return nil
}

func notNegative(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("must not be negative, got %s", d)
	}
	return nil
}

// keyByName finds a declared key without case.
func keyByName(name string) (configKey, bool) {
	for _, k := range configKeys {
		if strings.EqualFold(k.name(), name) {
			return k, true
		}
	}
	return nil, false
}

// isSection reports whether name (without case) holds other keys, as
// "kubelet" holds "kubelet.registryDir".
func isSection(name string) bool {
	for _, k := range configKeys {
		if len(k.name()) > len(name) && strings.EqualFold(k.name()[:len(name)+1], name+".") {
			return true
		}
	}
	return false
}

func envName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}
