// Package ckptfmt reads dranode's checkpoint framing (the layout documented in
// the checkpoint module's README) without knowing the Go types stored in it,
// so that dranodectl can verify and show any dranode state file — a File, a
// journal snapshot or a journal log — whatever kind and version it holds.
//
// It is a reader for people and tools, not for the agent: it reports every
// frame it could verify and exactly where and why the first bad one failed,
// and it never writes. Scan reads a file as a stream, one frame in memory at
// a time, and stops when its context ends, so that neither a huge log nor a
// crafted one can hold the tool for long.
package ckptfmt
