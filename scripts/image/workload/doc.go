// Package workload is the report the workload image's program prints: what a
// container was given — its environment, the device nodes under /dev and its
// mounts — as one JSON document on one line of standard output.
//
// A test harness reads a pod's container log (what "kubectl logs" shows) and
// calls [Parse] on it; the log may hold other lines (the program writes a
// human-readable form of the same report to standard error), [Parse] finds
// the report among them. [Collect] is what the program runs inside the
// container.
//
// With WORKLOAD_BLOCK set ([BlockEnv]) the program also probes a block
// device ([ProbeBlock]): whether it opens read-write, whether it reads
// zeros, and a pattern written and read back ([Report.Block]). With
// WORKLOAD_FILES set ([FilesEnv]) it reads the files a glob matches
// ([ReadFiles], [Report.Files]): how a test sees a file the runtime
// mounted, such as a claim's device metadata (KEP-5304).
//
// The package uses the standard library only, so a harness that imports it
// pulls in nothing else.
package workload
