// Command dranodectl inspects and exercises a dranode node: its state files,
// CDI specs, driver plugins, the kubelet's DRA calls and its ResourceSlices.
// Run "dranodectl --help" for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/dranode/dranode/tools/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
