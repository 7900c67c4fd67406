// Command hello prints its arguments and the cgo setting it was built with,
// for plugintest's tests.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
)

func main() {
	cgo := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "CGO_ENABLED" {
				cgo = s.Value
			}
		}
	}
	fmt.Printf("hello %v CGO_ENABLED=%s\n", os.Args[1:], cgo)
}
