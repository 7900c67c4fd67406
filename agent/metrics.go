package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the agent's Prometheus series (namespace "dranode"). Every
// series the agent exports is declared in this file: the claim flow's, the
// hand-over's (upgradeMetrics), the sweeper's (sweepMetrics) and the status
// writer's (claimStatusMetrics).
type metrics struct {
	prepareSeconds, unprepareSeconds *prometheus.HistogramVec
	prepareOverhead, preparePhases   *prometheus.HistogramVec
	prepareErrors, unprepareErrors   *prometheus.CounterVec
	prepareRefused                   *prometheus.CounterVec
	dryRunWrites                     *prometheus.CounterVec
	upgrade                          *upgradeMetrics
	collectors                       []prometheus.Collector
}

// counterVec declares a counter of the agent's namespace.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "dranode", Name: name, Help: help}, labels)
}

// Latency buckets from 0.5 ms (a record commit) to 10 s (a slow plugin).
var latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// prepareBuckets resolve the prepare path finely below 5 ms, where one
// durable commit (≈0.25 ms on an idle ext4 disk) and the agent's overhead
// target (p99 < 5 ms) live, and coarsely above, up to a slow plugin.
var prepareBuckets = []float64{
	0.00005, 0.0001, 0.0002, 0.0003, 0.0004, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.0025, 0.003, 0.004, 0.005,
	0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

// The phases of one Prepare, the values of the phase label of
// dranode_prepare_phase_duration_seconds, in the order they start.
const (
	// Waiting for another call on the same claim to finish.
	phaseLockWait = "lock-wait"
	// Reading the ResourceClaim (API server or claims directory).
	phaseClaimFetch = "claim-fetch"
	// Recording PrepareStarted durably.
	phaseRecordStarted = "record-started"
	// One driver plugin's Prepare call (gRPC round trip and the plugin's work).
	phasePlugin = "plugin"
	// Recording Prepared durably.
	phaseRecordPrepared = "record-prepared"
	// Writing the claim's CDI spec files, one per driver.
	phaseCDIWrite = "cdi-write"
)

func newMetrics(reg *prometheus.Registry, a *Agent) *metrics {
	m := &metrics{
		prepareSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "dranode", Name: "prepare_duration_seconds",
			Help: "Time to prepare one claim for one driver, including plugin calls and durable commits.", Buckets: prepareBuckets,
		}, []string{"driver"}),
		prepareOverhead: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "dranode", Name: "prepare_overhead_seconds",
			Help: "Time to prepare one claim for one driver minus the time spent in driver plugins' Prepare calls: the agent's own share, durable commits included.", Buckets: prepareBuckets,
		}, []string{"driver"}),
		preparePhases: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "dranode", Name: "prepare_phase_duration_seconds",
			Help: "Time of one phase of preparing a claim for one driver (lock-wait, claim-fetch, record-started, plugin, cdi-write, record-prepared).", Buckets: prepareBuckets,
		}, []string{"driver", "phase"}),
		unprepareSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "dranode", Name: "unprepare_duration_seconds",
			Help: "Time to unprepare one claim.", Buckets: latencyBuckets,
		}, []string{"driver"}),
		prepareErrors:   counterVec("prepare_errors_total", "Failed claim prepares.", "driver"),
		unprepareErrors: counterVec("unprepare_errors_total", "Failed claim unprepares.", "driver"),
		prepareRefused: counterVec("prepare_refused_total",
			"Claim prepares refused before any plugin was called (also counted in prepare_errors_total), by the driver of the device and the reason: device_in_use (another claim holds the device in the record, or is being prepared with it; the kubelet retries).",
			"driver", "reason"),
		dryRunWrites: counterVec("dry_run_slice_files_written_total", "ResourceSlice files written in standalone mode.", "driver"),
	}
	m.collectors = []prometheus.Collector{m.prepareSeconds, m.prepareOverhead, m.preparePhases, m.unprepareSeconds, m.prepareErrors, m.unprepareErrors, m.prepareRefused, m.dryRunWrites,
		stateCollector(a),
		refusedCollector(a),
	}
	for _, c := range m.collectors {
		reg.MustRegister(c)
	}
	return m
}

// stateCollector reads the agent's state at each scrape: plugin restarts,
// slice writes, tainted devices and the record's claims.
func stateCollector(a *Agent) prometheus.Collector {
	restarts := prometheus.NewDesc("dranode_plugin_restarts_total", "Restarts of a driver plugin process.", []string{"plugin"}, nil)
	writes := prometheus.NewDesc("dranode_slice_writes_total", "ResourceSlice writes to the API server.", []string{"driver", "verb"}, nil)
	tainted := prometheus.NewDesc("dranode_devices_tainted",
		"Devices of a driver published with its health taint (<driver>/unhealthy): reported unhealthy by the plugin, or so tainted by the plugin itself.", []string{"driver"}, nil)
	withdrawn := prometheus.NewDesc("dranode_devices_withdrawn",
		"Devices of a driver left out of its ResourceSlices because its plugin reports them unhealthy and device taints are not used (dranode_device_taints_unused).", []string{"driver"}, nil)
	taintsDropped := prometheus.NewDesc("dranode_device_taints_unused",
		"1 when unhealthy devices are withdrawn from the ResourceSlices instead of tainted: the API server stored a slice without the device taints sent (DRADeviceTaints off), or its Kubernetes minor has them off by default (before 1.36).", nil, nil)
	countersWithdrawn := prometheus.NewDesc("dranode_counter_devices_withdrawn",
		"Devices of a driver that consume shared counters left out of its ResourceSlices because the API server takes no shared counters (before 1.35), has them off by default (1.35) or stored a slice without them (DRAPartitionableDevices off): the others are published without the counters.", []string{"driver"}, nil)
	recorded := prometheus.NewDesc("dranode_claims_recorded", "Claims in the durable record.", nil, nil)
	uncertain := prometheus.NewDesc("dranode_record_uncertain_claims",
		"Claims in the durable record whose last state damage to the record hid (uncertain entries), until the kubelet's next call or reconciliation at start settles them.", nil, nil)
	return collectorFunc{descs: []*prometheus.Desc{restarts, writes, tainted, withdrawn, countersWithdrawn, taintsDropped, recorded, uncertain}, collect: func(ch chan<- prometheus.Metric) {
		if a.plugins != nil {
			for _, s := range a.plugins.Statuses() {
				ch <- prometheus.MustNewConstMetric(restarts, prometheus.CounterValue, float64(s.Restarts), s.Plugin)
			}
		}
		for _, d := range a.sortedDrivers() {
			ch <- prometheus.MustNewConstMetric(tainted, prometheus.GaugeValue, float64(d.taints.tainted.Load()), d.name)
			ch <- prometheus.MustNewConstMetric(withdrawn, prometheus.GaugeValue, float64(d.taints.withdrawn.Load()), d.name)
			ch <- prometheus.MustNewConstMetric(countersWithdrawn, prometheus.GaugeValue, float64(d.countersWithdrawn.Load()), d.name)
			a.drivers.mu.Lock()
			pub := d.publisher // nil while another instance holds the record
			a.drivers.mu.Unlock()
			if pub == nil {
				continue
			}
			st := pub.Stats()
			ch <- prometheus.MustNewConstMetric(writes, prometheus.CounterValue, float64(st.Creates), d.name, "create")
			ch <- prometheus.MustNewConstMetric(writes, prometheus.CounterValue, float64(st.Updates), d.name, "update")
			ch <- prometheus.MustNewConstMetric(writes, prometheus.CounterValue, float64(st.Deletes), d.name, "delete")
		}
		a.drivers.mu.Lock()
		dropped := a.drivers.withdraw
		a.drivers.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(taintsDropped, prometheus.GaugeValue, map[bool]float64{false: 0, true: 1}[dropped])
		if n, opened := a.record.Claims(); opened {
			ch <- prometheus.MustNewConstMetric(recorded, prometheus.GaugeValue, float64(n))
			ch <- prometheus.MustNewConstMetric(uncertain, prometheus.GaugeValue, float64(a.uncertainClaims()))
		}
	}}
}

func (m *metrics) unregister(reg *prometheus.Registry) {
	for _, c := range m.collectors {
		reg.Unregister(c)
	}
}

func (m *metrics) observePrepare(driver string, d time.Duration, err error) {
	m.prepareSeconds.WithLabelValues(driver).Observe(d.Seconds())
	if err != nil {
		m.prepareErrors.WithLabelValues(driver).Inc()
	}
}

// prepareObserver times the phases of one Prepare call for the driver the
// kubelet called. Prepare creates it and records it when done; the calls
// out of the claim flow (claim source, record, plugin, CDI) report their
// phase to it through the context (observePhase), so that the flow itself
// carries no timer. Phases may be reported concurrently.
type prepareObserver struct {
	// The observer is the call's context too: one allocation per Prepare
	// instead of two (context.WithValue's), which the allocation bound of
	// a Prepare answered from the record (cost_test.go) counts.
	context.Context

	m      *metrics // nil: an agent not started observes nothing
	driver string
	start  time.Time

	mu     sync.Mutex
	plugin time.Duration // inside plugin calls: the plugin's share, not the agent's
}

type prepareObserverKey struct{}

// observePrepare starts observing one Prepare call; its done records the
// agent's overhead.
func (m *metrics) startPrepareObserver(ctx context.Context, driver string) (context.Context, *prepareObserver) {
	o := &prepareObserver{Context: ctx, m: m, driver: driver, start: time.Now()}
	return o, o
}

// Value makes the observer findable by observePhase in the call's context.
func (o *prepareObserver) Value(key any) any {
	if key == (prepareObserverKey{}) {
		return o
	}
	return o.Context.Value(key)
}

// observePhase records, for the Prepare call observed in ctx if any, that
// phase ran from since until now, unless it failed (*failed != nil; a nil
// failed records it either way). Use it deferred, with the caller's named
// error result: defer observePhase(ctx, p, time.Now(), &err).
func observePhase(ctx context.Context, phase string, since time.Time, failed *error) {
	if failed != nil && *failed != nil {
		return
	}
	if o, ok := ctx.Value(prepareObserverKey{}).(*prepareObserver); ok {
		o.phase(phase, since)
	}
}

func (o *prepareObserver) phase(phase string, since time.Time) {
	d := time.Since(since)
	if phase == phasePlugin {
		o.mu.Lock()
		o.plugin += d
		o.mu.Unlock()
	}
	if o.m != nil {
		o.m.preparePhases.WithLabelValues(o.driver, phase).Observe(d.Seconds())
	}
}

// done records the agent's overhead: the whole call minus plugin time.
func (o *prepareObserver) done() {
	if o.m == nil {
		return
	}
	o.mu.Lock()
	plugin := o.plugin
	o.mu.Unlock()
	o.m.prepareOverhead.WithLabelValues(o.driver).Observe((time.Since(o.start) - plugin).Seconds())
}

func (m *metrics) observeUnprepare(driver string, d time.Duration, err error) {
	m.unprepareSeconds.WithLabelValues(driver).Observe(d.Seconds())
	if err != nil {
		m.unprepareErrors.WithLabelValues(driver).Inc()
	}
}

type collectorFunc struct {
	descs   []*prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

// upgradeMetrics count what the hand-over does.
type upgradeMetrics struct {
	forwarded *prometheus.CounterVec
	retries   *prometheus.CounterVec
	reclaims  prometheus.Counter
	held      prometheus.GaugeFunc
}

func newUpgradeMetrics(a *Agent) *upgradeMetrics {
	return &upgradeMetrics{
		forwarded: counterVec("forwarded_calls_total", "Kubelet calls this instance forwarded to the instance holding the claim record (rolling upgrade), by result.", "driver", "result"),
		retries:   counterVec("forward_retries_total", "Forwarding attempts that found the holder of the claim record unavailable and were retried.", "driver"),
		reclaims: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "dranode", Name: "record_reclaims_total",
			Help: "Times this instance took the claim record back from an instance that was gone.",
		}),
		held: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "dranode", Name: "record_held",
			Help: "1 while this instance holds the claim record and serves the kubelet's calls itself; 0 while it forwards them.",
		}, func() float64 {
			if a.record.Held() {
				return 1
			}
			return 0
		}),
	}
}

func (m *upgradeMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.forwarded, m.retries, m.reclaims, m.held}
}

// add registers more of the agent's series, unregistered with the rest at
// Stop.
func (m *metrics) add(reg *prometheus.Registry, what string, cs []prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering the %s metrics: %w", what, err)
		}
		m.collectors = append(m.collectors, c)
	}
	return nil
}

// claimStatusMetrics are the status writer's series.
func claimStatusMetrics() (writes, errors *prometheus.CounterVec) {
	writes = counterVec("claim_status_writes_total", "ResourceClaim status.devices writes accepted by the API server (op apply after a Prepare).", "driver", "op")
	errors = counterVec("claim_status_write_errors_total", "ResourceClaim status.devices writes that failed, by the API server's reason (Forbidden: RBAC or the per-driver resourceclaims/driver permission; Invalid; NotFound; Replaced: the claim was recreated; Timeout; Unknown: not reached). They never fail a Prepare or Unprepare.", "driver", "reason")
	return writes, errors
}

// sweepMetrics are the sweeper's series.
type sweepMetrics struct {
	sweeps    *prometheus.CounterVec
	cleaned   *prometheus.CounterVec
	leftovers *prometheus.GaugeVec
	errors    prometheus.Counter
}

func newSweepMetrics() *sweepMetrics {
	return &sweepMetrics{
		sweeps:    counterVec("record_sweeps_total", "Sweeps for leftover claims, by result: swept, or skipped entirely because the kubelet's DRA checkpoint is missing or unreadable.", "result"),
		cleaned:   counterVec("record_cleaned_claims_total", "Leftover claims (not listed by the kubelet's DRA checkpoint) unprepared and removed from the record, by reason: claim-deleted, claim-recreated, claim-unreserved.", "reason"),
		leftovers: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "dranode", Name: "record_leftover_claims", Help: "Leftover claims found by the last sweep, not cleaned yet (in their grace period, or their unprepare failed), by reason."}, []string{"reason"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "dranode", Name: "record_sweep_errors_total",
			Help: "Claims a sweep could not check (API lookup failed) or clean (plugin unprepare failed); each is retried at the next sweep.",
		}),
	}
}

func (m *sweepMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.sweeps, m.cleaned, m.leftovers, m.errors}
}

// refusedCollector is dranode_plugin_refused{plugin}: 1 for a configured
// plugin the agent refused to run, 0 for the others, so an alert can fire
// on the series without knowing the plugins.
func refusedCollector(a *Agent) prometheus.Collector {
	desc := prometheus.NewDesc("dranode_plugin_refused",
		"1 when the agent refused to run a configured driver plugin (wrong sha256, not executable); see /readyz and the log for why.",
		[]string{"plugin"}, nil)
	return collectorFunc{descs: []*prometheus.Desc{desc}, collect: func(ch chan<- prometheus.Metric) {
		refused := a.Refused()
		for _, d := range a.cfg.Plugins.Drivers {
			name := pluginName(d)
			v := 0.0
			if slices.ContainsFunc(refused, func(r *PluginRefusedError) bool { return r.Plugin == name }) {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, name)
		}
	}}
}
