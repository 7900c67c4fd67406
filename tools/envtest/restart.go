package envtest

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// ErrNotRunning is returned by RestartAPIServer on an environment that is
// not running (never started, or stopped).
var ErrNotRunning = errors.New("envtest: environment not running")

// RestartAPIServer stops kube-apiserver (SIGTERM, SIGKILL after StopGrace)
// and starts it again with the same command line — same port, certificates,
// etcd and audit log, which it appends to — then waits until it is ready.
// extraFlags are appended to that command line for this start and the
// ones after it: a control plane whose configuration changes, such as a
// feature gate turned off (a later --feature-gates adds to earlier ones).
// Clients keep their configuration; what a restart costs them (broken
// watches, relists, reconnects) is what a test of the restart observes.
// etcd and the other components keep running, as they would on a control
// plane whose apiserver alone is upgraded.
func (e *Environment) RestartAPIServer(extraFlags ...string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.started || e.stopped || e.config == nil {
		return ErrNotRunning
	}
	idx := -1
	for i, p := range e.procs {
		if p.name == APIServerBinary {
			idx = i
		}
	}
	if idx < 0 {
		return fmt.Errorf("%w: no kube-apiserver process", ErrNotRunning)
	}
	old := e.procs[idx]
	grace := e.StopGrace
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	if err := old.Stop(grace); err != nil {
		return err
	}
	args := append(append([]string{}, old.args...), extraFlags...)
	p, err := startProcess(APIServerBinary, old.binary, args, e.dir, e.Stdout, e.Stderr, &e.outMu)
	if err != nil {
		return err
	}
	e.procs[idx] = p
	timeout := e.StartTimeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.config.TLSClientConfig.CAData)
	client := httpsClient(pool)
	start := time.Now()
	if err := waitReady(p, timeout, func(ctx context.Context) error {
		return checkHTTPOK(ctx, client, e.config.Host+"/readyz", e.config.BearerToken)
	}); err != nil {
		return fmt.Errorf("after %v: %w", time.Since(start).Round(time.Millisecond), e.startError(p, err))
	}
	return nil
}
