// Package powerloss cuts the power under dranode's durable state and checks
// that nothing acknowledged is lost and nothing never written appears.
//
// A campaign (Run) repeats one iteration: mount a lazyfs (the package
// lazyfs: a FUSE file system that discards whatever was not fsynced when
// the power goes) over the store; start a writer process that commits
// through the product's real code on the mount and prints, on stdout
// (which is not on the mount), "try" before each call and "ack" after it
// returned; cut the power at a chosen point (the Nth mutating operation,
// the Kth acknowledgement, or the end of the run), which kills the writer
// and rebuilds the store to its durable state; then reopen the store with
// the product's own code and compare it with what was acknowledged and
// attempted. The next iteration's writer starts from what the cut left, as
// an agent restarting after a power cut does, so recovery is cut too.
//
// The workloads are "journal" (checkpoint.Journal, with compaction every
// few dozen commits), "file" (checkpoint.File: Save of a growing
// document), "claimcache" (claimcache.Cache: StartPrepare,
// FinishPrepare, StartUnprepare and Remove, every run a new boot ID) and
// "cdi" (cdi.SpecDir: Sweep, Write, a replacing Write, Remove), plus
// "cdi-nofsync" and "cdi-nodirsync", copies of SpecDir's writes with one
// fsync left out, which exist to prove that the checks catch such bugs.
//
// The test binary is the writer: its TestMain must call WriterMain when
// IsWriter reports that Run started it.
package powerloss
