// Command loop-plugin is the loop block device driver plugin for the
// dranode agent (package examples/loop). It needs CAP_SYS_ADMIN (the loop
// ioctls) and /dev/loop-control and /dev/loopN.
package main

import (
	"github.com/dranode/dranode/examples/loop"
	"github.com/dranode/dranode/pluginmgr"
)

func main() {
	pluginmgr.Serve(loop.New(pluginmgr.Logger("loop")))
}
