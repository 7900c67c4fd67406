package config

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var updateREADME = flag.Bool("update-readme", false, "rewrite agent/README.md's table of configuration keys from configKeys (go generate)")

// readmePath is the agent's README, whose "Configuration" section holds the
// table of keys an operator reads.
const readmePath = "../README.md"

const (
	keyTableBegin = "<!-- The table of keys is made from configKeys (config/keys.go): edit there, then `go generate ./config`. -->\n"
	keyTableEnd   = "<!-- End of the table of keys. -->\n"
)

// keyTable is the README's table of configuration keys, one row per
// declared key.
func keyTable() string {
	var b strings.Builder
	b.WriteString("| key | flag | environment variable | type | default | what |\n|---|---|---|---|---|---|\n")
	for _, k := range configKeys {
		flag, env := "(file only)", "—"
		if k.flagName() != "" {
			flag, env = "`--"+k.flagName()+"`", "`"+envName(k.name())+"`"
		}
		b.WriteString("| `" + k.name() + "` | " + flag + " | " + env + " | " + k.typeName() + " | " +
			k.docDefault() + " | " + k.doc() + " |\n")
	}
	return b.String()
}

// The agent README's table is the declarations' (go generate rewrites it).
func TestConfigKeyTableInREADME(t *testing.T) {
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	before, rest, ok := strings.Cut(readme, keyTableBegin)
	table, after, ok2 := strings.Cut(rest, keyTableEnd)
	if !ok || !ok2 {
		t.Fatalf("%s has no table of keys between %q and %q", readmePath, keyTableBegin, keyTableEnd)
	}
	want := keyTable()
	if *updateREADME {
		if err := os.WriteFile(readmePath, []byte(before+keyTableBegin+want+keyTableEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if table != want {
		t.Errorf("%s's table of keys is not configKeys': run `go generate ./config` in agent/.\nREADME:\n%s\nconfigKeys:\n%s", readmePath, table, want)
	}
}

// Every key is declared well: a unique name and flag, a default its own
// checks accept (except where a default is filled from other keys), and
// help text.
func TestConfigKeysDeclared(t *testing.T) {
	names, flags := map[string]bool{}, map[string]bool{}
	def := Default()
	def.Plugins.Drivers = []Driver{{Name: "p", Path: "/p", SHA256: strings.Repeat("ab", 32)}}
	for _, k := range configKeys {
		lower := strings.ToLower(k.name())
		if names[lower] || (k.flagName() != "" && flags[k.flagName()]) {
			t.Errorf("key %s or its flag --%s declared twice", k.name(), k.flagName())
		}
		names[lower], flags[k.flagName()] = true, true
		if k.usage() == "" || k.doc() == "" || k.typeName() == "" {
			t.Errorf("key %s: usage %q, doc %q, type %q", k.name(), k.usage(), k.doc(), k.typeName())
		}
		if strings.Contains(k.doc(), "|") || strings.Contains(k.doc(), "\n") {
			t.Errorf("key %s: its doc would break the README's table: %q", k.name(), k.doc())
		}
	}
	for _, k := range configKeys {
		k.derive(&def)
	}
	def.StateDir = "/var/lib/dranode"
	if err := def.Validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
}
