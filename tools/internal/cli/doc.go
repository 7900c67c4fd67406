// Package cli implements the dranodectl command line: a cobra command tree
// (the CLI library dranode-agent uses) whose leaves turn parsed flags and
// arguments into a result printed as a table, JSON or YAML.
//
// Run is the whole program; cmd/dranodectl only hands it os.Args, the
// standard streams and a context from NotifyContext, which SIGINT and
// SIGTERM cancel, so tests run the exact code an operator runs. Commands
// take that context from cobra (Command.Context) and stop when it ends.
package cli
