package agent

import (
	"fmt"
	"net/http"
	"net/http/pprof"
	"runtime"
	"runtime/debug"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
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

// DefaultMemoryLimit is memoryLimit's default; see ApplyMemoryLimit.
const DefaultMemoryLimit = "32Mi"

// minMemoryLimit keeps a typo ("40Ki") from making the garbage collector
// run all the time: the agent's live heap alone is several MiB.
const minMemoryLimit = 16 << 20

// MemoryLimitBytes parses MemoryLimit: 0 means no limit of the agent's own.
func (c Config) MemoryLimitBytes() (int64, error) {
	if c.MemoryLimit == "" || c.MemoryLimit == "0" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(c.MemoryLimit)
	if err != nil {
		return 0, fmt.Errorf("%q is not a quantity such as \"40Mi\": %v", c.MemoryLimit, err)
	}
	n, ok := q.AsInt64()
	if !ok || n < 0 {
		return 0, fmt.Errorf("%q is not a byte count", c.MemoryLimit)
	}
	if n != 0 && n < minMemoryLimit {
		return 0, fmt.Errorf("%q is below the minimum of 16Mi (0 disables the limit)", c.MemoryLimit)
	}
	return n, nil
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
func ApplyMemoryLimit(cfg Config) (int64, error) {
	n, err := cfg.MemoryLimitBytes()
	if err != nil {
		return 0, &ConfigError{Key: "memoryLimit", Reason: err.Error()}
	}
	if n == 0 {
		return debug.SetMemoryLimit(-1), nil
	}
	debug.SetMemoryLimit(n)
	return n, nil
}
