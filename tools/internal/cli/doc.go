// Package cli implements the dranodectl command line: a tree of subcommands,
// each a function from parsed flags and arguments to a result that is printed
// as a table, JSON or YAML.
//
// Run is the whole program; cmd/dranodectl only hands it os.Args and the
// standard streams, so tests run the exact code an operator runs.
package cli
