package agent

import (
	"net/http"
	"net/http/pprof"
)

// addDebugHandlers serves Go's profiles when http.pprof is set.
func (a *Agent) addDebugHandlers(mux *http.ServeMux) {
	if !a.cfg.HTTP.Pprof {
		return
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
