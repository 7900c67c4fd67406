// Package durable replaces files so that a crash of the process or of the
// machine leaves either the old or the new complete file, never a mix or an
// empty one.
//
// [WriteFile] writes a temporary file in the same directory, fsyncs it,
// renames it over the target and fsyncs the directory; [SyncDir] makes
// creations, renames and removals in a directory durable. A [Writer] does
// the same with options: skipping the fsyncs ([Writer.NoSync]) and counting
// them ([Writer.Syncs]); the package functions use the zero Writer.
//
// Temporary files are named [TempPrefix](name) followed by random
// characters. They start with "." and do not end in the target's extension,
// so tools that load "*.json" (CDI runtimes, for one) never see a
// half-written file. WriteFile removes its temporary file when it fails; a
// crash leaves it behind, and an owner that knows no writer is running (one
// holding a lock, say) may remove files with that prefix.
//
// The package depends on the standard library only.
package durable
