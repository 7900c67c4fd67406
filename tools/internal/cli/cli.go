package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// ErrUsage marks a command line that cannot be run (unknown command, missing
// argument, bad flag value). Run exits with status 2 for it.
var ErrUsage = errors.New("usage")

// usageError is a bad command line, with the help text of the command it was
// meant for.
type usageError struct {
	msg  string
	help string
}

func (e *usageError) Error() string        { return e.msg }
func (e *usageError) Is(target error) bool { return target == ErrUsage }

// env is what a command runs with: its streams and context.
type env struct {
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
}

// command is one node of the command tree: a group with children, or a leaf
// with run.
type command struct {
	name     string
	usage    string // arguments after the command path, e.g. "FILE"
	short    string
	long     string
	children []*command
	// flags adds the command's flags to fs and returns the function that runs
	// it with the positional arguments once fs is parsed.
	flags func(fs *flag.FlagSet) func(e *env, args []string) error
}

func root() *command {
	return &command{
		name:  "dranodectl",
		short: "inspect and exercise a dranode node: state files, CDI specs, driver plugins, the kubelet's DRA calls, ResourceSlices",
		children: []*command{
			checkpointCommand(),
			cdiCommand(),
			pluginCommand(),
			kubeletCommand(),
			slicesCommand(),
		},
	}
}

// Run executes dranodectl with args (without the program name) and returns
// the process exit status: 0 on success, 1 when the command failed, 2 for a
// bad command line. Help goes to stdout with status 0.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{ctx: ctx, stdout: stdout, stderr: stderr}
	err := dispatch(e, root(), nil, args)
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "dranodectl: %s\n\n%s", ue.msg, ue.help)
		return 2
	}
	fmt.Fprintf(stderr, "dranodectl: %v\n", err)
	return 1
}

func dispatch(e *env, c *command, path []string, args []string) error {
	path = append(path, c.name)
	if c.flags == nil {
		help := groupHelp(c, path)
		if len(args) == 0 {
			return &usageError{msg: strings.Join(path, " ") + ": missing subcommand", help: help}
		}
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			fmt.Fprint(e.stdout, help)
			return flag.ErrHelp
		}
		for _, child := range c.children {
			if child.name == args[0] {
				return dispatch(e, child, path, args[1:])
			}
		}
		return &usageError{msg: fmt.Sprintf("%s: unknown subcommand %q", strings.Join(path, " "), args[0]), help: help}
	}
	fs := flag.NewFlagSet(strings.Join(path, " "), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	run := c.flags(fs)
	help := leafHelp(c, path, fs)
	positional, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(e.stdout, help)
		return err
	}
	if err != nil {
		return &usageError{msg: err.Error(), help: help}
	}
	err = run(e, positional)
	var ue *usageError
	if errors.As(err, &ue) && ue.help == "" {
		ue.help = help
	}
	return err
}

// parseInterleaved lets flags follow positional arguments
// ("checkpoint inspect FILE -o json"), which the flag package alone does not;
// "--" ends flag parsing.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if i := slices.Index(args, "--"); i >= 0 && len(args)-i-1 == len(rest) {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

func groupHelp(c *command, path []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s — %s\n\nUsage:\n  %s <command> [flags]\n\nCommands:\n", strings.Join(path, " "), c.short, strings.Join(path, " "))
	names := make([]string, 0, len(c.children))
	byName := map[string]*command{}
	for _, ch := range c.children {
		names = append(names, ch.name)
		byName[ch.name] = ch
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  %-12s %s\n", n, byName[n].short)
	}
	fmt.Fprintf(&b, "\nRun '%s <command> --help' for more.\n", strings.Join(path, " "))
	return b.String()
}

func leafHelp(c *command, path []string, fs *flag.FlagSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s — %s\n\nUsage:\n  %s", strings.Join(path, " "), c.short, strings.Join(path, " "))
	if c.usage != "" {
		fmt.Fprintf(&b, " %s", c.usage)
	}
	if !strings.Contains(c.usage, "--") {
		b.WriteString(" [flags]")
	}
	b.WriteString("\n")
	if c.long != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimSpace(c.long))
	}
	b.WriteString("\nFlags:\n")
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		dashes := "--"
		if len(f.Name) == 1 {
			dashes = "-"
		}
		fmt.Fprintf(&b, "  %s%s %s\n      %s", dashes, f.Name, name, usage)
		if f.DefValue != "" && f.DefValue != "false" {
			fmt.Fprintf(&b, " (default %q)", f.DefValue)
		}
		b.WriteString("\n")
	})
	return b.String()
}

// usagef builds a usage error for the command being run.
func usagef(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// exactArgs checks the number of positional arguments.
func exactArgs(args []string, names ...string) error {
	if len(args) != len(names) {
		if len(args) < len(names) {
			return usagef("missing argument %s", names[len(args)])
		}
		return usagef("unexpected argument %q", args[len(names)])
	}
	return nil
}
