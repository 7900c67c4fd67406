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
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/dranode/dranode/agent"
)

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "dranode-agent:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "dranode-agent",
		Short:         "dranode reference DRA node agent",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := agent.LoadConfig(cmd.Flags(), os.Environ())
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
		},
	}
	agent.AddFlags(root.Flags())
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	root.PersistentFlags().AddGoFlag(klogFlags.Lookup("v"))

	cfgCmd := &cobra.Command{Use: "config", Short: "inspect the configuration"}
	validate := &cobra.Command{
		Use:   "validate",
		Short: "merge flags, DRANODE_ environment, file and defaults, and check the result against this node: paths, plugin binaries' sha256, kubeconfig",
		Long: `Merges the configuration as the agent does and checks what the agent would
refuse at start on the node this runs on, without creating or changing
anything: paths (exist, are directories, writable or creatable), the boot ID
file, the kubeconfig, the plugin binaries' sha256, the HTTP address. What it
cannot check here (the API server, free ports) is listed as "not checked".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := agent.LoadConfig(cmd.Flags(), os.Environ())
			if err != nil {
				return err
			}
			// The binaries too: a digest that does not match is what the
			// running agent would refuse the plugin for.
			warnings, pluginErr := agent.CheckPluginBinaries(cfg)
			for _, w := range warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			notChecked, nodeErr := agent.CheckNode(cfg)
			for _, n := range notChecked {
				fmt.Fprintln(cmd.OutOrStdout(), "not checked:", n)
			}
			if err := errors.Join(nodeErr, pluginErr); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "configuration is valid")
			return nil
		},
	}
	print := &cobra.Command{
		Use: "print", Short: "print the effective configuration as YAML",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := agent.LoadConfig(cmd.Flags(), os.Environ())
			if err != nil {
				return err
			}
			out, err := cfg.YAML()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	agent.AddFlags(validate.Flags())
	agent.AddFlags(print.Flags())
	cfgCmd.AddCommand(validate, print)
	root.AddCommand(cfgCmd)
	return root
}
