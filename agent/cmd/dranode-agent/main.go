// Command dranode-agent is the dranode reference node agent. See the agent
// package and its README for the configuration.
//
//	dranode-agent --config /etc/dranode/agent.yaml   run the agent
//	dranode-agent config validate --config FILE      check the merged configuration against this node
//	dranode-agent config print --config FILE         print it (YAML)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/dranode/dranode/agent"
	"github.com/dranode/dranode/agent/config"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit status: 0, 1 when
// the command failed, 2 for a command line that cannot be run (unknown flag
// or command, arguments where none are taken), as dranodectl does.
func run(args []string, stdout, stderr io.Writer) int {
	root := newCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	var failed *commandError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &failed):
		fmt.Fprintln(stderr, "dranode-agent:", failed.err)
		return 1
	}
	// Cobra's own errors (flags, arguments, commands) come before any
	// command runs: the command line is wrong.
	fmt.Fprintf(stderr, "dranode-agent: %v\n\n%s", err, cmd.UsageString())
	return 2
}

// commandError is an error of a command that ran, as opposed to one in its
// command line.
type commandError struct{ err error }

func (e *commandError) Error() string { return e.err.Error() }
func (e *commandError) Unwrap() error { return e.err }

// ran marks the errors of a command's body as its own.
func ran(f func(cmd *cobra.Command, args []string) error) func(cmd *cobra.Command, args []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := f(cmd, args); err != nil {
			return &commandError{err: err}
		}
		return nil
	}
}

func newCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "dranode-agent",
		Short:         "dranode reference DRA node agent",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE:          ran(runAgent),
	}
	config.AddFlags(root.Flags())
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	root.PersistentFlags().AddGoFlag(klogFlags.Lookup("v"))

	cfgCmd := &cobra.Command{Use: "config", Short: "inspect the configuration", Args: cobra.NoArgs,
		// A group: run alone it is a command line without a subcommand.
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fmt.Errorf("%s: missing subcommand", cmd.CommandPath())
		}}
	validate := &cobra.Command{
		Use:   "validate",
		Short: "merge flags, DRANODE_ environment, file and defaults, and check the result against this node: paths, plugin binaries' sha256, kubeconfig",
		Long: `Merges the configuration as the agent does and checks what the agent would
refuse at start on the node this runs on, without creating or changing
anything: paths (exist, are directories, writable or creatable), the boot ID
file, the kubeconfig, the kubelet's DRA checkpoint, the plugin binaries'
sha256, the HTTP address (its port bound for a moment). What it found that
refuses nothing is listed as "found", what it cannot check here (the API
server, the plugins' start) as "not checked".`,
		Args: cobra.NoArgs,
		RunE: ran(validateConfig),
	}
	print := &cobra.Command{
		Use: "print", Short: "print the effective configuration as YAML",
		Args: cobra.NoArgs,
		RunE: ran(printConfig),
	}
	config.AddFlags(validate.Flags())
	config.AddFlags(print.Flags())
	cfgCmd.AddCommand(validate, print)
	root.AddCommand(cfgCmd)
	return root
}

func runAgent(cmd *cobra.Command, _ []string) error {
	cfg, err := config.Load(cmd.Flags(), os.Environ())
	if err != nil {
		return err
	}
	a, err := agent.New(cfg, agent.Options{})
	if err != nil {
		return err
	}
	limit, err := agent.ApplyMemoryLimit(cfg)
	if err != nil {
		return err
	}
	klog.InfoS("Go memory limit", "bytes", limit, "memoryLimit", cfg.MemoryLimit)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err = a.Run(ctx)
	klog.Flush()
	return err
}

func validateConfig(cmd *cobra.Command, _ []string) error {
	cfg, err := config.Load(cmd.Flags(), os.Environ())
	if err != nil {
		return err
	}
	// The binaries too: a digest that does not match is what the
	// running agent would refuse the plugin for.
	warnings, pluginErr := config.CheckPluginBinaries(cfg)
	for _, w := range warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
	}
	report, nodeErr := config.CheckNode(cfg)
	for _, f := range report.Found {
		fmt.Fprintln(cmd.OutOrStdout(), "found:", f)
	}
	for _, n := range report.NotChecked {
		fmt.Fprintln(cmd.OutOrStdout(), "not checked:", n)
	}
	if err := errors.Join(nodeErr, pluginErr); err != nil {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), "configuration is valid")
	return nil
}

func printConfig(cmd *cobra.Command, _ []string) error {
	cfg, err := config.Load(cmd.Flags(), os.Environ())
	if err != nil {
		return err
	}
	out, err := cfg.YAML()
	if err != nil {
		return err
	}
	_, err = cmd.OutOrStdout().Write(out)
	return err
}
