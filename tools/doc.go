// Package tools is the root of dranode's operator tooling module: the
// dranodectl command (cmd/dranodectl, implemented in internal/cli) and, in
// the nested module tools/envtest, the real control plane tests run against.
//
// The package itself holds no code; see README.md for every subcommand.
package tools
