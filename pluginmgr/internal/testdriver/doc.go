// Package testdriver is a small driver plugin for pluginmgr's own tests,
// whose misbehaviour the tests choose: by flag for handshake failures, by its
// config section for runtime faults. The command is cmd/testdriver; the
// benchmarks also call the driver in-process.
package testdriver
