package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command and group answers --help on stdout with status 0, and every
// leaf documents -o when it prints data.
func TestHelpEverywhere(t *testing.T) {
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		args := append(append([]string{}, path...), "--help")
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := dranodectl(t, args...)
			wantCode(t, r, 0)
			if !strings.Contains(r.stdout, "Usage:") || r.stderr != "" {
				t.Errorf("help:\n%s\nstderr: %s", r.stdout, r.stderr)
			}
			if !c.HasSubCommands() && !strings.Contains(r.stdout, "-o, --output string") {
				t.Errorf("%s has no -o flag:\n%s", strings.Join(path, " "), r.stdout)
			}
		})
		for _, ch := range c.Commands() {
			if ch.Name() != "help" {
				walk(ch, append(append([]string{}, path...), ch.Name()))
			}
		}
	}
	walk(newRoot(), nil)
}

func TestCommandLineErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "missing subcommand"},
		{[]string{"frobnicate"}, 2, `unknown subcommand "frobnicate"`},
		{[]string{"checkpoint"}, 2, "checkpoint: missing subcommand"},
		{[]string{"checkpoint", "inspect"}, 2, "missing argument PATH"},
		{[]string{"checkpoint", "inspect", "a", "b"}, 2, `unexpected argument "b"`},
		{[]string{"checkpoint", "inspect", "a", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"checkpoint", "frobnicate"}, 2, `unknown subcommand "frobnicate"`},
		{[]string{"checkpoint", "verify", "/nonexistent/file"}, 1, "no such file"},
		{[]string{"cdi", "parse", "a/b=c", "-o", "xml"}, 2, "want table, json or yaml"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := dranodectl(t, tt.args...)
			wantCode(t, r, tt.code, tt.want)
			if tt.code == 2 && !strings.Contains(r.stderr, "Usage:") {
				t.Errorf("a usage error should show the usage:\n%s", r.stderr)
			}
		})
	}
}

func TestFlagsAfterArguments(t *testing.T) {
	// "-o json" may come after the positional argument, and "--" ends flags.
	a := dranodectl(t, "cdi", "parse", "a.com/b=c", "-o", "json")
	b := dranodectl(t, "cdi", "parse", "-o", "json", "a.com/b=c")
	wantCode(t, a, 0)
	if a.stdout != b.stdout {
		t.Errorf("flag position changed the result:\n%s\n%s", a.stdout, b.stdout)
	}
	c := dranodectl(t, "cdi", "parse", "-o", "json", "--", "-o")
	wantCode(t, c, 1, `"-o"`)
}
