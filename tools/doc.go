// Package tools holds dranode's operator tooling (the dranodectl command) and
// test environments.
//
// The module is filled in by later issues; it has no functionality yet.
package tools
