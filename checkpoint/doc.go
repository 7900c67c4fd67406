// Package checkpoint stores versioned, checksummed, crash-safe state files: a
// single-document store with migrations between format versions, and an
// append-only journal with group commit whose cost per change does not grow
// with the state.
//
// The core package depends on the standard library only.
package checkpoint
