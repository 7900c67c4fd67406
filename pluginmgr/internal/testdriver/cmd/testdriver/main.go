// Command testdriver runs the test driver plugin (see package testdriver).
package main

import "github.com/dranode/dranode/pluginmgr/internal/testdriver"

func main() { testdriver.Main() }
