// Package notmain is no command.
package notmain

// X is something to export.
const X = 1
