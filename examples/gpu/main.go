package main

import "github.com/dranode/dranode/pluginmgr"

func main() {
	pluginmgr.Serve(newDriver(pluginmgr.Logger("gpu")))
}
