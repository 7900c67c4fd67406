package agent

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dranode/dranode/agent/config"
)

// opsServer is the operations endpoint: metrics, health and readiness.
type opsServer struct {
	srv  *http.Server
	addr string
}

// serveHTTP serves /metrics, /healthz (the process is alive and its record
// open) and /readyz (Ready).
func (a *Agent) serveHTTP() error {
	lis, err := net.Listen("tcp", a.cfg.HTTP.Address)
	if err != nil {
		return &config.Error{Key: "http.address", Reason: err.Error()}
	}
	a.ops.addr = lis.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.opts.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	a.addDebugHandlers(mux)
	a.ops.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = a.ops.srv.Serve(lis) }()
	return nil
}
