package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// ErrUsage marks a command line that cannot be run (unknown command, missing
// argument, bad flag value). Run exits with status 2 for it.
var ErrUsage = errors.New("usage")

// usageError is a bad command line.
type usageError struct{ msg string }

func (e *usageError) Error() string        { return e.msg }
func (e *usageError) Is(target error) bool { return target == ErrUsage }

// usagef builds a usage error for the command being run.
func usagef(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// Interrupted is the cause of the context Run is given when a signal asks
// dranodectl to stop (see NotifyContext). Run then exits with ExitStatus.
type Interrupted struct {
	Signal syscall.Signal
}

func (e *Interrupted) Error() string { return "stopped by " + signalName(e.Signal) }

// ExitStatus is the status a shell reports for a process the signal ended:
// 128 + the signal's number (130 for SIGINT, 143 for SIGTERM).
func (e *Interrupted) ExitStatus() int { return 128 + int(e.Signal) }

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// Run executes dranodectl with args (without the program name) and returns
// the process exit status: 0 on success, 1 when the command failed, 2 for a
// bad command line, and Interrupted.ExitStatus when ctx was cancelled with an
// *Interrupted cause before the command returned. Help goes to stdout with
// status 0. Commands run with ctx and stop when it ends.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	var intr *Interrupted
	if errors.As(context.Cause(ctx), &intr) {
		if err != nil {
			fmt.Fprintf(stderr, "dranodectl: %v\n", err)
		}
		if err == nil || !strings.Contains(err.Error(), intr.Error()) {
			fmt.Fprintf(stderr, "dranodectl: %v\n", intr)
		}
		return intr.ExitStatus()
	}
	if err == nil {
		return 0
	}
	if errors.Is(err, ErrUsage) {
		fmt.Fprintf(stderr, "dranodectl: %v\n\n%s", err, cmd.UsageString())
		return 2
	}
	fmt.Fprintf(stderr, "dranodectl: %v\n", err)
	return 1
}

func newRoot() *cobra.Command {
	root := group(&cobra.Command{
		Use:               "dranodectl",
		Short:             "inspect and exercise a dranode node: state files, CDI specs, driver plugins, the kubelet's DRA calls, ResourceSlices",
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}, checkpointCommand(), cdiCommand(), pluginCommand(), kubeletCommand(), slicesCommand(), recordCommand())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: err.Error()} })
	return root
}

// group makes c a command that only holds children: run alone, or with an
// argument that is not one of them, it is a usage error; "help" shows its
// help.
func group(c *cobra.Command, children ...*cobra.Command) *cobra.Command {
	c.Args = cobra.ArbitraryArgs // so that cobra hands unknown names to RunE
	c.RunE = func(c *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return usagef("%s: missing subcommand", c.CommandPath())
		case args[0] == "help":
			return c.Help()
		}
		return usagef("%s: unknown subcommand %q", c.CommandPath(), args[0])
	}
	c.AddCommand(children...)
	return c
}

// leaf gives c the -o/--output flag and makes it run run with the format
// chosen. c's other flags are added before, their values read by run.
func leaf(c *cobra.Command, run func(c *cobra.Command, args []string, format outputFormat) error) *cobra.Command {
	out := outputFlag(c)
	c.RunE = func(c *cobra.Command, args []string) error { return run(c, args, *out) }
	return c
}

// exactArgs checks the number of positional arguments, naming the missing
// or the first unexpected one.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) < len(names) {
			return usagef("missing argument %s", names[len(args)])
		}
		if len(args) > len(names) {
			return usagef("unexpected argument %q", args[len(names)])
		}
		return nil
	}
}
