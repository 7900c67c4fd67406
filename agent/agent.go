package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/dranode/dranode/cdi"
	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/sliceclient"
)

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
type Agent struct {
	cfg  Config
	opts Options
	log  logr.Logger

	cache      *claimcache.Cache
	report     *claimcache.RestoreReport
	specs      cdi.SpecDir
	claims     ClaimSource
	client     *apiClient
	standalone bool
	plugins    *pluginmgr.Manager
	metrics    *metrics
	status     *statusWriter // nil standalone
	sweeper    *sweeper      // nil when cleanup.interval is 0

	mu       sync.Mutex
	drivers  map[string]*driver // by DRA driver name
	byPlugin map[string]*driver // by plugin name
	pending  map[string]inventory.Inventory
	health   map[string][]pluginmgr.DeviceHealth // by plugin name, before the driver is known
	refused  []*PluginRefusedError

	gate     recordGate
	handover handover
	upgrade  *upgradeMetrics

	stopping atomic.Bool
	inflight sync.WaitGroup
	ctx      context.Context // the agent's lifetime, for work started outside a call
	cancel   context.CancelFunc
	httpSrv  *http.Server
	httpAddr string
	started  bool
	stopOnce sync.Once
	stopErr  error
}

// New checks the configuration and returns an agent that does nothing
// until Start.
func New(cfg Config, opts Options) (*Agent, error) {
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
	return &Agent{
		cfg:      cfg,
		opts:     opts,
		log:      opts.Logger.WithValues("node", cfg.NodeName),
		specs:    cdi.SpecDir{Path: cfg.CDI.Dir, NoSync: true}, // no fsync: see prepareDriver
		drivers:  map[string]*driver{},
		byPlugin: map[string]*driver{},
		pending:  map[string]inventory.Inventory{},
		health:   map[string][]pluginmgr.DeviceHealth{},
	}, nil
}

// Standalone reports whether the agent runs without an API server (known
// after Start).
func (a *Agent) Standalone() bool { return a.standalone }

// HTTPAddr is the address the operations endpoint listens on (after Start).
func (a *Agent) HTTPAddr() string { return a.httpAddr }

// Drivers returns the DRA driver names served (after Start), sorted.
func (a *Agent) Drivers() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for n := range a.drivers {
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
	if a.started {
		return errors.New("agent: Start called twice")
	}
	a.started = true
	ctx, a.cancel = context.WithCancel(ctx)
	a.ctx = ctx
	defer func() {
		if err != nil {
			_ = a.Stop()
		}
	}()
	bootID, err := readBootID(a.cfg.BootIDFile)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(a.cfg.StateDir, 0o700); err != nil {
		return &ConfigError{Key: "stateDir", Reason: err.Error(), Err: err}
	}
	// A damaged record keeps what came before the damage, and the claims
	// whose last state it hid become uncertain entries, reconciled below,
	// rather than being forgotten while their devices are still prepared.
	// With an instance ID, another instance of the agent may hold the
	// record; it hands it over (handover.go).
	if err := a.openRecord(ctx, bootID); err != nil {
		return fmt.Errorf("opening the claim record in stateDir: %w", err)
	}
	a.log.Info("Claim record restored", "claims", a.cache.Len(), "interrupted", len(a.report.Interrupted),
		"rebootDetected", a.report.RebootDetected, "noLongerPrepared", len(a.report.NoLongerPrepared),
		"uncertain", len(a.report.Uncertain))
	a.logDamage()
	if err := a.connect(); err != nil {
		return err
	}
	a.metrics = newMetrics(a.opts.Registry, a)
	if !a.standalone {
		a.status = newStatusWriter(a.client.resource, a.log, a.opts.Registry)
	}
	a.upgrade = newUpgradeMetrics(a)
	if err := a.upgrade.register(a); err != nil {
		return err
	}

	a.plugins = pluginmgr.NewManager(pluginmgr.Options{
		NodeName:    a.cfg.NodeName,
		Logger:      a.opts.PluginLogger,
		OnInventory: a.onInventory,
		OnHealth:    a.onHealth,
		OnStatus:    a.onStatus,
	})
	var configs []pluginmgr.PluginConfig
	for _, d := range a.cfg.Plugins.Drivers {
		section, err := json.Marshal(d.Config)
		if err != nil {
			return &ConfigError{Key: "plugins.drivers." + d.Name + ".config", Reason: err.Error()}
		}
		if d.Config == nil {
			section = nil
		}
		configs = append(configs, pluginmgr.PluginConfig{Name: pluginName(d), Path: d.Path, SHA256: d.SHA256, Args: d.Args, Config: section})
	}
	// One untrustworthy binary must not take every other driver of the
	// node down with it (a DaemonSet would crash loop): pluginmgr checks
	// each binary right before it would run it, and such a plugin is
	// refused alone; /readyz and a metric say so.
	if err := a.plugins.Start(ctx, configs); err != nil {
		if err := a.refuseUntrusted(err); err != nil {
			return fmt.Errorf("starting driver plugins: %w", err)
		}
	}
	for _, c := range configs {
		p, ok := a.plugins.Plugin(c.Name)
		if !ok {
			if a.isRefused(c.Name) {
				continue
			}
			return fmt.Errorf("plugin %q did not start", c.Name)
		}
		if err := a.addDriver(ctx, p); err != nil {
			return err
		}
	}
	a.finishInterrupted(ctx)
	a.reconcileUncertain(ctx)
	a.sweepSpecs()
	for _, d := range a.sortedDrivers() {
		if err := d.serve(a); err != nil {
			return err
		}
	}
	if err := a.serveHandover(); err != nil {
		return err
	}
	a.endStart()
	if a.cfg.HTTP.Address != "" {
		if err := a.serveHTTP(); err != nil {
			return err
		}
	}
	if err := a.startSweeper(ctx); err != nil {
		return err
	}
	a.log.Info("Agent started", "drivers", a.Drivers(), "refusedPlugins", len(a.Refused()), "standalone", a.standalone, "http", a.httpAddr)
	return nil
}

func readBootID(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", &ConfigError{Key: "bootIDFile", Reason: err.Error()}
	}
	id := strings.TrimSpace(string(data))
	if id == "" {
		return "", &ConfigError{Key: "bootIDFile", Reason: path + " is empty"}
	}
	return id, nil
}

// connect picks the mode: kubeconfig, in-cluster, or standalone.
func (a *Agent) connect() error {
	rc := a.opts.RESTConfig
	switch {
	case rc != nil:
		rc = rest.CopyConfig(rc)
	case a.cfg.Kubeconfig != "":
		var err error
		rc, err = clientcmd.BuildConfigFromFlags("", a.cfg.Kubeconfig)
		if err != nil {
			return &ConfigError{Key: "kubeconfig", Reason: err.Error()}
		}
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		var err error
		rc, err = rest.InClusterConfig()
		if err != nil {
			return fmt.Errorf("in-cluster configuration: %w", err)
		}
	}
	if rc != nil {
		rc.QPS, rc.Burst = a.cfg.Claims.QPS, a.cfg.Claims.Burst
		rc.UserAgent = "dranode-agent/" + a.cfg.NodeName
		var err error
		if a.client, err = newAPIClient(rc); err != nil {
			return err
		}
	}
	a.standalone = a.client == nil
	switch {
	case a.opts.Claims != nil:
		a.claims = a.opts.Claims
	case a.standalone:
		a.claims = DirClaimSource{Dir: a.cfg.Claims.Dir}
	default:
		a.claims = a.client.claims
	}
	return nil
}

func (a *Agent) addDriver(ctx context.Context, p *pluginmgr.Plugin) error {
	info := p.Info()
	a.mu.Lock()
	defer a.mu.Unlock()
	if other, dup := a.drivers[info.DriverName]; dup {
		return &ConfigError{Key: "plugins.drivers", Reason: fmt.Sprintf("plugins %q and %q both serve driver %q", other.plugin.Name(), p.Name(), info.DriverName)}
	}
	d := &driver{name: info.DriverName, plugin: p, healthy: newHealthFeed(), health: info.Health}
	taint, err := inventory.HealthTaint(d.name, resourceapi.DeviceTaintEffect(a.cfg.Slices.UnhealthyTaintEffect))
	if err != nil {
		return fmt.Errorf("driver %s: %w", d.name, err)
	}
	d.taints.taint = taint
	if !a.standalone {
		pub, err := a.newPublisher(d)
		if err != nil {
			return err
		}
		d.publisher = pub
		if err := pub.Start(ctx); err != nil {
			return fmt.Errorf("driver %s: starting the ResourceSlice publisher: %w", d.name, err)
		}
	}
	a.drivers[d.name] = d
	a.byPlugin[p.Name()] = d
	if h, ok := a.health[p.Name()]; ok {
		a.healthLocked(d, h)
		d.healthy.set(h)
		delete(a.health, p.Name()) // later reports go to the driver directly
	} else if d.health {
		a.awaitFirstHealthLocked(d)
	}
	inv, ok := a.pending[p.Name()]
	if ok {
		delete(a.pending, p.Name()) // later inventories go to the driver directly
	} else {
		inv, _ = p.Inventory()
	}
	if len(inv.Pools) > 0 {
		a.inventoryLocked(d, inv)
	}
	return nil
}

func (a *Agent) newPublisher(d *driver) (*sliceclient.Publisher, error) {
	pub, err := sliceclient.New(sliceclient.Options{
		Client: a.client.slices, DriverName: d.name, NodeName: a.cfg.NodeName,
		Debounce: a.cfg.Slices.SyncDelay,
		OnError: func(err error) {
			a.log.Error(err, "Publishing ResourceSlices", "driver", d.name)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("driver %s: %w", d.name, err)
	}
	return pub, nil
}

func (a *Agent) sortedDrivers() []*driver {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*driver, 0, len(a.drivers))
	for _, d := range a.drivers {
		out = append(out, d)
	}
	slices.SortFunc(out, func(x, y *driver) int { return strings.Compare(x.name, y.name) })
	return out
}

func (a *Agent) driver(name string) *driver {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.drivers[name]
}

func (a *Agent) onInventory(plugin string, inv inventory.Inventory) {
	a.mu.Lock()
	defer a.mu.Unlock()
	d, ok := a.byPlugin[plugin]
	if !ok {
		a.pending[plugin] = inv // the driver is registered after Launch returns
		return
	}
	a.inventoryLocked(d, inv)
}

// publishLocked publishes the plugin's latest inventory with its unhealthy
// devices tainted. The publisher writes only what differs from the stored
// slices, so a call that changes nothing writes nothing.
func (a *Agent) publishLocked(d *driver) {
	if !a.standalone && d.publisher == nil {
		return // handed over: the holder publishes; a reclaim publishes d.taints
	}
	inv := d.taints.published()
	if d.publisher != nil {
		if err := d.publisher.Update(inv); err != nil {
			a.log.Error(err, "Inventory rejected", "driver", d.name)
		}
		return
	}
	dr := sliceclient.DryRun{DriverName: d.name, NodeName: a.cfg.NodeName}
	paths, err := dr.WriteDir(a.cfg.Slices.DryRunDir, inv)
	if err != nil {
		a.log.Error(err, "Writing dry-run ResourceSlices", "driver", d.name)
		return
	}
	if a.metrics != nil {
		a.metrics.dryRunWrites.WithLabelValues(d.name).Add(float64(len(paths)))
	}
	a.log.V(1).Info("Dry-run ResourceSlices written", "driver", d.name, "dir", a.cfg.Slices.DryRunDir, "files", len(paths))
}

func (a *Agent) onHealth(plugin string, h []pluginmgr.DeviceHealth) {
	a.mu.Lock()
	d, ok := a.byPlugin[plugin]
	if ok {
		a.healthLocked(d, h)
	} else {
		a.health[plugin] = h
	}
	a.mu.Unlock()
	if ok {
		d.healthy.set(h)
	}
}

func (a *Agent) onStatus(s pluginmgr.Status) {
	log := a.log.WithValues("plugin", s.Plugin, "state", s.State, "pid", s.PID, "restarts", s.Restarts)
	if s.Err != nil {
		log.Error(s.Err, "Driver plugin status")
	} else {
		log.Info("Driver plugin status")
	}
}

// Ready reports whether every plugin runs and, with a kubelet, every driver
// is registered; the error says what is missing, including every plugin
// that was refused.
func (a *Agent) Ready() error {
	if a.stopping.Load() {
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
	if a.cfg.Kubelet.InstanceID != "" && !a.holdsRecord() {
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
	a.stopOnce.Do(func() { a.stopErr = a.stop() })
	return a.stopErr
}

func (a *Agent) stop() error {
	var errs []error
	drivers := a.sortedDrivers()
	for _, d := range drivers {
		d.stopRegistration()
	}
	if a.cfg.Kubelet.InstanceID != "" && a.started && len(drivers) > 0 {
		// The kubelet keeps calling this instance until its plugin
		// watcher notices the registration socket is gone (its
		// reconciler runs every second); after a kubelet restart this
		// may be the instance it prefers. Answer those calls rather than
		// fail them: another instance serves once the kubelet moved on.
		time.Sleep(unregisterGrace)
	}
	a.stopping.Store(true)
	done := make(chan struct{})
	go func() {
		for _, d := range drivers {
			d.stopDRA() // GracefulStop: returns when calls in flight are done
		}
		a.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(a.cfg.ShutdownTimeout):
		errs = append(errs, fmt.Errorf("calls still in flight after %s", a.cfg.ShutdownTimeout))
		for _, d := range drivers {
			d.forceStop()
		}
	}
	if a.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, a.httpSrv.Shutdown(ctx))
		cancel()
	}
	a.closeHandover()
	a.closeForwarding()
	a.mu.Lock()
	var pubs []*sliceclient.Publisher
	for _, d := range drivers {
		if d.publisher != nil {
			pubs = append(pubs, d.publisher)
		}
	}
	a.mu.Unlock()
	for _, p := range pubs {
		p.Stop()
	}
	a.sweeper.stop()
	if a.status != nil {
		a.status.stop(a.opts.Registry) // after the last kubelet call: no more writes come
	}
	if a.plugins != nil {
		errs = append(errs, a.plugins.Close())
	}
	if a.cancel != nil {
		a.cancel()
	}
	a.gate.mu.Lock()
	if a.cache != nil {
		errs = append(errs, a.cache.Close())
	}
	a.gate.held = false
	a.gate.mu.Unlock()
	a.endStart()
	if a.metrics != nil {
		a.metrics.unregister(a.opts.Registry)
	}
	return errors.Join(errs...)
}

// newRequestID names one kubelet call in the logs.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
