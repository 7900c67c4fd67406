// Command workload is the program of the workload image: it prints what its
// container was given — environment, device nodes under /dev, mounts — as
// one line of JSON on standard output (package
// github.com/dranode/dranode/scripts/image/workload parses it) and the same
// in a human-readable form on standard error, then waits for SIGTERM or
// SIGINT and exits 0. With WORKLOAD_BLOCK set it also probes that block
// device (workload.ProbeBlock: open, read, write WORKLOAD_BLOCK_PATTERN,
// read back) and reports the outcome; with WORKLOAD_FILES set it reports
// the content of the files that glob matches (workload.ReadFiles), such as
// a claim's device metadata file.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/dranode/dranode/scripts/image/workload"
)

func main() {
	// Subscribe before reporting, so a signal sent as soon as the report is
	// seen is not lost.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)

	r, err := workload.Collect(os.Environ(), "/dev", "/proc/self/mountinfo")
	if err != nil {
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(1)
	}
	if dev := os.Getenv(workload.BlockEnv); dev != "" {
		r.Block = workload.ProbeBlock(dev, os.Getenv(workload.BlockPatternEnv))
	}
	if pattern := os.Getenv(workload.FilesEnv); pattern != "" {
		r.Files = workload.ReadFiles(pattern)
	}
	line, err := r.Marshal()
	if err != nil {
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(1)
	}
	os.Stdout.Write(append(line, '\n'))
	r.WriteText(os.Stderr)
	<-sig
}
