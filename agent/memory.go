package agent

import (
	"net/http"
	"net/http/pprof"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/dranode/dranode/agent/config"
)

// addDebugHandlers serves Go's profiles when http.pprof is set.
func (a *Agent) addDebugHandlers(mux *http.ServeMux) {
	if !a.cfg.HTTP.Pprof {
		return
	}
	// The block and mutex profiles are empty unless sampling is on; with
	// pprof asked for, finding where calls wait is worth its small cost.
	runtime.SetBlockProfileRate(int(10 * time.Microsecond))
	runtime.SetMutexProfileFraction(10)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// ApplyMemoryLimit sets the Go runtime's soft memory limit of this process
// from cfg.MemoryLimit (runtime/debug.SetMemoryLimit) and returns the limit
// now in effect. With "0" it changes nothing, so GOMEMLIMIT, when set,
// stays in effect.
//
// The limit covers the memory the Go runtime manages (heap, stacks, its own
// structures), not the binary's text pages. Without one the collector lets
// the heap grow to twice what is live before collecting, and returns freed
// pages to the kernel only slowly; the agent's live heap is small and
// steady, so a limit a little above it keeps the resident set near what is
// live at a small CPU cost (BENCHMARKS.md has both measurements). The
// runtime caps the collector's CPU share when the limit is too tight, so a
// limit too low slows the agent down rather than failing it. dranode-agent
// calls it at start; an embedding program decides for itself.
func ApplyMemoryLimit(cfg config.Config) (int64, error) {
	n, err := cfg.MemoryLimitBytes()
	if err != nil {
		return 0, &config.Error{Key: "memoryLimit", Reason: err.Error()}
	}
	if n == 0 {
		return debug.SetMemoryLimit(-1), nil
	}
	debug.SetMemoryLimit(n)
	return n, nil
}
