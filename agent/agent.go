package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/dranode/dranode/agent/config"
	"github.com/dranode/dranode/agent/internal/record"
	"github.com/dranode/dranode/cdi"
	"github.com/dranode/dranode/pluginmgr"
)

// unregisterGrace is how long an instance with an instance ID keeps
// serving its DRA socket after removing its registration socket at Stop:
// twice the period of the kubelet plugin watcher's reconciler.
const unregisterGrace = 2 * time.Second

// ErrStopping is returned for kubelet calls that arrive after Stop began;
// it carries gRPC code Unavailable, which the kubelet retries.
var ErrStopping = errors.New("agent is stopping")

// Options are the parts of an Agent that tests and embedders may replace.
// The zero value works.
type Options struct {
	// Logger; default klog.Background().
	Logger logr.Logger
	// Claims overrides where ResourceClaims are read from.
	Claims ClaimSource
	// RESTConfig, when set, is the API server to use instead of the
	// configuration's kubeconfig (or the in-cluster one). The agent builds
	// its own client from it, with the claims QPS and burst of the
	// configuration.
	RESTConfig *rest.Config
	// Registry receives the agent's metrics; default a new registry, served
	// on /metrics.
	Registry *prometheus.Registry
	// PluginLogger receives the plugins' logs and the plugin host's;
	// default Logger through pluginmgr.LogrLogger, so that the plugins'
	// lines come out in the agent's format, each with plugin=<name> and
	// level=<the plugin's level>.
	PluginLogger hclog.Logger
}

// Agent is one running dranode agent. Create it with New, then Start and
// Stop (or Run).
//
// An Agent only composes its parts. Its configuration is package config
// (keys, loading, validation); the record holder is package
// agent/internal/record, reached through record.go; the others are files
// of this package:
//
//   - the kubelet-facing server (server.go, healthstream.go, sockets.go,
//     socket_probe_*.go): registration, the DRA service and the health
//     stream, per driver;
//   - routing (routing.go), a wrapper around the DRA service that forwards a
//     call to the instance holding the claim record when that is another;
//   - the record holder (package agent/internal/record; record.go is its
//     callbacks into the agent): opens the claim record, gates the record
//     operations and hands the record over;
//   - the claim flow (prepare.go, unprepare.go, cdispec.go): Prepare and
//     Unprepare against the record, the plugins and CDI;
//   - the publishers (publish.go, health.go, status.go): ResourceSlices,
//     health taints and the claims' device status;
//   - the sweeper (sweep.go) and the reconciliation at start (reconcile.go);
//   - the driver set (drivers.go, refuse.go): the plugins and the drivers
//     they serve;
//   - the connections (connect.go, apiclient.go, claims.go): cluster or
//     standalone mode, the API client, where ResourceClaims come from;
//   - the operations endpoint (ops.go, memory.go, metrics.go): metrics,
//     health, readiness, profiles and the memory limit.
//
// Lock order. A goroutine that holds more than one of the agent's locks
// takes them in this order, and never the other way round:
//
//  1. the record gate (record.Holder's gate): read for the whole of a
//     kubelet call answered here (routeCall) and of a sweep, through
//     record.Holder.Enter, written by the hand-over and the reclaim, which
//     therefore wait for those and call recordHooks under it;
//  2. a claim's lock in the record (claimcache.Cache.LockClaim), taken by
//     the claim flow and the sweeper under the gate's read lock;
//  3. the driver set, drivers.mu (drivers, inventories, health, taints,
//     publishers);
//  4. the hand-over socket's state (inside record.Holder) and the
//     forwarding state, forward.mu: leaves, nothing is taken under them.
//
// The status writer's and the health feed's mutexes are leaves of their own
// and are never held while calling into another part. DESIGN.md, "The
// agent's parts", draws the parts and repeats this order.
type Agent struct {
	cfg  config.Config
	opts Options
	log  logr.Logger

	client     *apiClient // nil standalone
	standalone bool
	claims     ClaimSource
	specs      cdi.SpecDir
	plugins    *pluginmgr.Manager

	drivers driverSet      // drivers.go
	record  *record.Holder // record.go, package agent/internal/record
	forward forwarder      // routing.go
	metrics *metrics       // metrics.go
	status  *statusWriter  // nil standalone
	sweeper *sweeper       // nil when cleanup.interval is 0
	ops     opsServer      // ops.go
	life    lifecycle
}

// lifecycle is the agent's own state between Start and Stop.
type lifecycle struct {
	stopping atomic.Bool
	inflight sync.WaitGroup  // kubelet calls being answered
	ctx      context.Context // the agent's lifetime, for work started outside a call
	cancel   context.CancelFunc
	started  bool
	stopOnce sync.Once
	stopErr  error
}

// New checks the configuration and returns an agent that does nothing
// until Start.
func New(cfg config.Config, opts Options) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = klog.Background()
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.PluginLogger == nil {
		opts.PluginLogger = pluginmgr.LogrLogger(opts.Logger.WithValues("node", cfg.NodeName))
	}
	a := &Agent{
		cfg:     cfg,
		opts:    opts,
		log:     opts.Logger.WithValues("node", cfg.NodeName),
		specs:   cdi.SpecDir{Path: cfg.CDI.Dir, NoSync: true}, // no fsync: see writeSpecs
		drivers: newDriverSet(),
	}
	a.record = newRecordHolder(a)
	return a, nil
}

// Standalone reports whether the agent runs without an API server (known
// after Start).
func (a *Agent) Standalone() bool { return a.standalone }

// HTTPAddr is the address the operations endpoint listens on (after Start).
func (a *Agent) HTTPAddr() string { return a.ops.addr }

// Drivers returns the DRA driver names served (after Start), sorted.
func (a *Agent) Drivers() []string {
	a.drivers.mu.Lock()
	defer a.drivers.mu.Unlock()
	var out []string
	for n := range a.drivers.byName {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Run starts the agent, waits for ctx to be done and stops it.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	a.log.Info("Stopping")
	return a.Stop()
}

// Start opens the claim record, starts the plugins, publishes their
// inventories, finishes interrupted unprepares, reconciles the claims a
// damaged record left uncertain, and serves the kubelet. On
// failure everything started is stopped again.
func (a *Agent) Start(ctx context.Context) (err error) {
	if a.life.started {
		return errors.New("agent: Start called twice")
	}
	a.life.started = true
	ctx, a.life.cancel = context.WithCancel(ctx)
	a.life.ctx = ctx
	defer func() {
		if err != nil {
			_ = a.Stop()
		}
	}()
	if err := a.startRecord(ctx); err != nil {
		return err
	}
	if err := a.connect(); err != nil {
		return err
	}
	if err := a.startMetrics(); err != nil {
		return err
	}
	if err := a.startDrivers(ctx); err != nil {
		return err
	}
	// The record is settled before the kubelet is served: no kubelet call
	// races the reconciliation.
	a.finishInterrupted(ctx)
	a.reconcileUncertain(ctx)
	a.sweepSpecs()
	if err := a.serveKubelet(); err != nil {
		return err
	}
	if a.cfg.HTTP.Address != "" {
		if err := a.serveHTTP(); err != nil {
			return err
		}
	}
	if err := a.startSweeper(ctx); err != nil {
		return err
	}
	a.log.Info("Agent started", "drivers", a.Drivers(), "refusedPlugins", len(a.Refused()), "standalone", a.standalone, "http", a.ops.addr)
	return nil
}

// startRecord opens the claim record in stateDir. A damaged record keeps
// what came before the damage, and the claims whose last state it hid
// become uncertain entries, reconciled before the kubelet is served,
// rather than being forgotten while their devices are still prepared.
// With an instance ID, another instance of the agent may hold the record;
// it hands it over (record.go).
func (a *Agent) startRecord(ctx context.Context) error {
	bootID, err := readBootID(a.cfg.BootIDFile)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(a.cfg.StateDir, 0o700); err != nil {
		return &config.Error{Key: "stateDir", Reason: err.Error(), Err: err}
	}
	if err := a.record.Open(ctx, bootID); err != nil {
		return fmt.Errorf("opening the claim record in stateDir: %w", err)
	}
	r := a.record.Report()
	a.log.Info("Claim record restored", "claims", a.record.Cache().Len(), "interrupted", len(r.Interrupted),
		"rebootDetected", r.RebootDetected, "noLongerPrepared", len(r.NoLongerPrepared), "uncertain", len(r.Uncertain))
	a.logDamage()
	return nil
}

// startMetrics registers the agent's series and, with an API server, starts
// the device status writer.
func (a *Agent) startMetrics() error {
	a.metrics = newMetrics(a.opts.Registry, a)
	if !a.standalone {
		a.status = newStatusWriter(a.client.resource, a.log, a.opts.Registry)
	}
	a.metrics.upgrade = newUpgradeMetrics(a)
	return a.metrics.add(a.opts.Registry, "hand-over", a.metrics.upgrade.collectors())
}

// serveKubelet serves every driver's sockets, then the hand-over socket,
// and ends the start (another instance may take the record from now on).
func (a *Agent) serveKubelet() error {
	for _, d := range a.sortedDrivers() {
		if err := d.serve(a); err != nil {
			return err
		}
	}
	if err := a.record.ServeHandover(); err != nil {
		return err
	}
	a.record.EndStart()
	return nil
}

// Ready reports whether every plugin runs and, with a kubelet, every driver
// is registered; the error says what is missing, including every plugin
// that was refused.
func (a *Agent) Ready() error {
	if a.life.stopping.Load() {
		return ErrStopping
	}
	if a.plugins == nil {
		return errors.New("not started")
	}
	var problems []string
	for _, r := range a.Refused() {
		problems = append(problems, r.Error())
	}
	for _, s := range a.plugins.Statuses() {
		if s.State != pluginmgr.StateRunning {
			problems = append(problems, fmt.Sprintf("plugin %s is %s", s.Plugin, s.State))
		}
	}
	if a.cfg.Kubelet.InstanceID != "" && !a.record.Held() {
		// The DaemonSet controller stops the old pod once the new one is
		// ready: ready means serving the record, not just forwarding.
		problems = append(problems, "the claim record is held by another instance (this one forwards the kubelet's calls to it)")
	}
	for _, d := range a.sortedDrivers() {
		if !d.serving.Load() {
			problems = append(problems, fmt.Sprintf("driver %s: sockets not served yet", d.name))
		} else if !a.standalone && !d.registered.Load() {
			problems = append(problems, fmt.Sprintf("driver %s: not registered with the kubelet", d.name))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Stop stops accepting kubelet calls, waits for those in flight (at most
// ShutdownTimeout), stops the plugins and publishers and closes the record.
// ResourceSlices stay published and the record stays on disk: a restarted
// agent continues from them.
func (a *Agent) Stop() error {
	a.life.stopOnce.Do(func() { a.life.stopErr = a.stop() })
	return a.life.stopErr
}

func (a *Agent) stop() error {
	drivers := a.sortedDrivers()
	errs := []error{a.stopServing(drivers)}
	if a.ops.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, a.ops.srv.Shutdown(ctx))
		cancel()
	}
	a.record.CloseHandover()
	a.closeForwarding()
	a.stopPublishers(drivers)
	a.sweeper.stop()
	if a.status != nil {
		a.status.stop(a.opts.Registry) // after the last kubelet call: no more writes come
	}
	if a.plugins != nil {
		errs = append(errs, a.plugins.Close())
	}
	if a.life.cancel != nil {
		a.life.cancel()
	}
	errs = append(errs, a.record.Close())
	a.record.EndStart()
	if a.metrics != nil {
		a.metrics.unregister(a.opts.Registry)
	}
	return errors.Join(errs...)
}

// stopServing unregisters the drivers from the kubelet, then stops
// admitting kubelet calls and waits for those in flight, at most
// ShutdownTimeout.
func (a *Agent) stopServing(drivers []*driver) error {
	for _, d := range drivers {
		d.stopRegistration()
	}
	if a.cfg.Kubelet.InstanceID != "" && a.life.started && a.otherInstanceRegistered(drivers) {
		// The kubelet keeps calling this instance until its plugin
		// watcher notices the registration socket is gone (its
		// reconciler runs every second); after a kubelet restart this
		// may be the instance it prefers. Answer those calls rather than
		// fail them: the other instance serves once the kubelet moved on.
		// Without another instance the kubelet has nowhere to move on to:
		// its calls fail and are retried either way, as without an ID.
		time.Sleep(unregisterGrace)
	}
	a.life.stopping.Store(true)
	done := make(chan struct{})
	go func() {
		for _, d := range drivers {
			d.stopDRA() // GracefulStop: returns when calls in flight are done
		}
		a.life.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(a.cfg.ShutdownTimeout):
		for _, d := range drivers {
			d.forceStop()
		}
		return fmt.Errorf("calls still in flight after %s", a.cfg.ShutdownTimeout)
	}
}
