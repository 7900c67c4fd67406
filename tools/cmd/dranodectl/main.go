// Command dranodectl inspects and exercises a dranode node: its state files,
// CDI specs, driver plugins, the kubelet's DRA calls and its ResourceSlices.
// Run "dranodectl --help" for the commands.
//
// SIGINT and SIGTERM stop the command; dranodectl then exits with 130 or
// 143, as a shell reports a process the signal ended.
package main

import (
	"context"
	"os"

	"github.com/dranode/dranode/tools/internal/cli"
)

func main() {
	ctx, stop := cli.NotifyContext(context.Background(), os.Stderr, os.Exit)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
