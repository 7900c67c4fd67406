package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dranode/dranode/agent/config"
	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/sliceclient"
)

// driverSet holds the drivers this agent serves and what their plugins
// reported before their driver was known. Its mutex also guards each
// driver's publisher and taints (lock order: after the record gate and a
// claim's lock).
type driverSet struct {
	mu       sync.Mutex
	byName   map[string]*driver // by DRA driver name
	byPlugin map[string]*driver // by plugin name
	pending  map[string]inventory.Inventory
	health   map[string][]pluginmgr.DeviceHealth // by plugin name, before the driver is known
	refused  []*PluginRefusedError
	// withdraw: the API server keeps no device taints, or has them off by
	// default (withdrawUnhealthy), so unhealthy devices are left out of the
	// slices instead of tainted, for the rest of the process's life.
	withdraw bool
	// noCounters: the API server takes no shared counters, or has them off
	// by default (withdrawCounterDevices), so the devices that consume
	// them are published only as far as they fit together
	// (inventory.WithoutSharedCounters), for the rest of the process's life.
	noCounters bool
}

func newDriverSet() driverSet {
	return driverSet{
		byName:   map[string]*driver{},
		byPlugin: map[string]*driver{},
		pending:  map[string]inventory.Inventory{},
		health:   map[string][]pluginmgr.DeviceHealth{},
	}
}

// driver is one DRA driver served to the kubelet.
type driver struct {
	name      string
	plugin    *pluginmgr.Plugin
	publisher *sliceclient.Publisher
	health    bool // the plugin reports health
	// statelessPrepare: the plugin's Prepare leaves nothing on the node
	// for Unprepare to undo (pluginmgr.Info.StatelessPrepare, as it said
	// when it started: its binary and configuration are fixed for the
	// agent's lifetime).
	statelessPrepare bool
	healthy          *healthFeed
	taints           healthTaints // what is published: the plugin's inventory with its unhealthy devices tainted
	// countersWithdrawn: devices left out of the published inventory by
	// noCounters, for the metric.
	countersWithdrawn atomic.Int64

	regPath, draPath string
	regSrv, draSrv   *grpc.Server
	serving          atomic.Bool
	registered       atomic.Bool
}

// startDrivers starts the configured plugins and adds the driver each one
// serves. One untrustworthy binary must not take every other driver of the
// node down with it (a DaemonSet would crash loop): pluginmgr checks each
// binary right before it would run it, and such a plugin is refused alone;
// /readyz and a metric say so.
func (a *Agent) startDrivers(ctx context.Context) error {
	a.plugins = pluginmgr.NewManager(pluginmgr.Options{
		NodeName:    a.cfg.NodeName,
		Logger:      a.opts.PluginLogger,
		OnInventory: a.onInventory,
		OnHealth:    a.onHealth,
		OnStatus:    a.onStatus,
	})
	configs, err := a.pluginConfigs()
	if err != nil {
		return err
	}
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
	return nil
}

// pluginConfigs are the configured plugins as pluginmgr runs them.
func (a *Agent) pluginConfigs() ([]pluginmgr.PluginConfig, error) {
	var configs []pluginmgr.PluginConfig
	for _, d := range a.cfg.Plugins.Drivers {
		section, err := json.Marshal(d.Config)
		if err != nil {
			return nil, &config.Error{Key: "plugins.drivers." + d.Name + ".config", Reason: err.Error()}
		}
		if d.Config == nil {
			section = nil
		}
		configs = append(configs, pluginmgr.PluginConfig{Name: pluginName(d), Path: d.Path, SHA256: d.SHA256, Args: d.Args, Config: section})
	}
	return configs, nil
}

func (a *Agent) addDriver(ctx context.Context, p *pluginmgr.Plugin) error {
	info := p.Info()
	taint, err := inventory.HealthTaint(info.DriverName, resourceapi.DeviceTaintEffect(a.cfg.Slices.UnhealthyTaintEffect))
	if err != nil {
		return fmt.Errorf("driver %s: %w", info.DriverName, err)
	}
	if !a.standalone {
		a.learnServer(ctx, info.DriverName, taint)
	}
	a.drivers.mu.Lock()
	defer a.drivers.mu.Unlock()
	if other, dup := a.drivers.byName[info.DriverName]; dup {
		return &config.Error{Key: "plugins.drivers", Reason: fmt.Sprintf("plugins %q and %q both serve driver %q", other.plugin.Name(), p.Name(), info.DriverName)}
	}
	d := &driver{name: info.DriverName, plugin: p, healthy: newHealthFeed(), health: info.Health, statelessPrepare: info.StatelessPrepare}
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
	a.drivers.byName[d.name] = d
	a.drivers.byPlugin[p.Name()] = d
	if h, ok := a.drivers.health[p.Name()]; ok {
		a.healthLocked(d, h)
		d.healthy.set(h)
		delete(a.drivers.health, p.Name()) // later reports go to the driver directly
	} else if d.health {
		a.awaitFirstHealthLocked(d)
	}
	inv, ok := a.drivers.pending[p.Name()]
	if ok {
		delete(a.drivers.pending, p.Name()) // later inventories go to the driver directly
	} else {
		inv, _ = p.Inventory()
	}
	if len(inv.Pools) > 0 {
		a.inventoryLocked(d, inv)
	}
	return nil
}

func (a *Agent) sortedDrivers() []*driver {
	a.drivers.mu.Lock()
	defer a.drivers.mu.Unlock()
	out := make([]*driver, 0, len(a.drivers.byName))
	for _, d := range a.drivers.byName {
		out = append(out, d)
	}
	slices.SortFunc(out, func(x, y *driver) int { return strings.Compare(x.name, y.name) })
	return out
}

func (a *Agent) driver(name string) *driver {
	a.drivers.mu.Lock()
	defer a.drivers.mu.Unlock()
	return a.drivers.byName[name]
}

func (a *Agent) onStatus(s pluginmgr.Status) {
	log := a.log.WithValues("plugin", s.Plugin, "state", s.State, "pid", s.PID, "restarts", s.Restarts)
	if s.Err != nil {
		log.Error(s.Err, "Driver plugin status")
	} else {
		log.Info("Driver plugin status")
	}
}

// prepare has the driver's plugin prepare one claim.
func (d *driver) prepare(ctx context.Context, c pluginmgr.Claim) ([]pluginmgr.PrepareResult, error) {
	defer observePhase(ctx, phasePlugin, time.Now(), nil)
	return d.plugin.Prepare(ctx, []pluginmgr.Claim{c})
}
