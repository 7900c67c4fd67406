// Command loop-plugin is the loop block device driver plugin for the
// dranode agent (package examples/loop). It needs CAP_SYS_ADMIN (the loop
// ioctls) and /dev/loop-control and /dev/loopN.
//
// The agent starts it without arguments. "loop-plugin detach STATEDIR"
// detaches the loop devices of every disk under STATEDIR, which the plugin
// never does itself (an uninstall, or the end of `make run`).
package main

import (
	"fmt"
	"os"

	"github.com/dranode/dranode/examples/loop"
	"github.com/dranode/dranode/pluginmgr"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "detach" {
		if err := loop.DetachAll(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "loop-plugin detach:", err)
			os.Exit(1)
		}
		return
	}
	pluginmgr.Serve(loop.New(pluginmgr.Logger("loop")))
}
