// Package plugintest builds the binaries that tests run as processes: a
// driver plugin for pluginmgr.Launch or conformance.Run, the agent, a
// driver.
//
// Build compiles a main package as a vendor's CI builds it for the images
// (the module alone, without cgo) and takes the binary from the go
// command's cache of executables (the one behind go run, Go 1.24 and
// later) when that cache holds a binary of the same inputs. A go build
// links afresh every time: in one make check of this repository, the
// tests' go build calls linked the same few binaries tens of times,
// about 78 CPU-seconds of linking (compat/node/BENCHMARKS.md has the
// figures).
package plugintest
