package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/sliceclient"
)

// driver is one DRA driver served to the kubelet.
type driver struct {
	name      string
	plugin    *pluginmgr.Plugin
	publisher *sliceclient.Publisher
	health    bool // the plugin reports health
	healthy   *healthFeed
	taints    healthTaints // what is published: the plugin's inventory with its unhealthy devices tainted

	regPath, draPath string
	regSrv, draSrv   *grpc.Server
	serving          atomic.Bool
	registered       atomic.Bool
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

func (a *Agent) onStatus(s pluginmgr.Status) {
	log := a.log.WithValues("plugin", s.Plugin, "state", s.State, "pid", s.PID, "restarts", s.Restarts)
	if s.Err != nil {
		log.Error(s.Err, "Driver plugin status")
	} else {
		log.Info("Driver plugin status")
	}
}
