package config

import (
	"github.com/spf13/pflag"
)

// AddFlags registers one flag per key that is not a list, plus --config.
// --help shows each flag's type and default; the value is kept as written
// and parsed by Load like the file's values, so an error names the
// key the same way whatever the source.
func AddFlags(fs *pflag.FlagSet) {
	fs.String("config", "", "YAML configuration file (or DRANODE_CONFIG)")
	for _, k := range configKeys {
		if k.flagName() == "" {
			continue
		}
		f := fs.VarPF(&flagText{text: k.defaultText(), typ: k.typeName()}, k.flagName(), "",
			k.usage()+" (key "+k.name()+", "+envName(k.name())+")")
		if k.typeName() == "bool" {
			f.NoOptDefVal = "true" // --http-pprof alone turns it on
		}
	}
}

// flagText is a flag's value as written, typed for --help only.
type flagText struct{ text, typ string }

func (f *flagText) String() string     { return f.text }
func (f *flagText) Set(s string) error { f.text = s; return nil }
func (f *flagText) Type() string       { return f.typ }
