package agent

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/sliceclient"
)

func (a *Agent) newPublisher(d *driver) (*sliceclient.Publisher, error) {
	pub, err := sliceclient.New(sliceclient.Options{
		Client: a.client.slices, DriverName: d.name, NodeName: a.cfg.NodeName,
		Debounce: a.cfg.Slices.SyncDelay,
		OnError: func(err error) {
			a.log.Error(err, "Publishing ResourceSlices", "driver", d.name)
			dropped, ok := errors.AsType[*sliceclient.DroppedFieldsError](err)
			// OnError must not block; these take the drivers' lock.
			if ok && dropped.TaintsDropped() {
				go a.withdrawUnhealthy("The API server stored a ResourceSlice without its device taints (is the DRADeviceTaints feature gate off?)")
			}
			if ok && dropped.CountersDropped() {
				go a.withdrawCounterDevices("The API server stored a ResourceSlice without its shared counters (is the DRAPartitionableDevices feature gate off?)")
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("driver %s: %w", d.name, err)
	}
	return pub, nil
}

// learnServer learns the API server's Kubernetes minor (once per agent),
// against which every inventory is checked before it is written
// (inventory.ValidateForKubernetes), and what it does not keep of a slice:
// where the minor has device taints or shared counters off by default, or
// a dry-run create shows them dropped (probeServer), unhealthy devices are
// withdrawn instead of tainted and devices that share counters published
// without them, so that the first write already fits the server. Every
// path that starts a publisher calls it first, without the drivers' lock,
// with the driver's name and health taint for the probe.
func (a *Agent) learnServer(ctx context.Context, driver string, taint resourceapi.DeviceTaint) {
	a.client.askServerMinor(ctx, a.log)
	m := int(a.client.minor.Load())
	if taintsOffByDefault(m) {
		a.withdrawUnhealthy(fmt.Sprintf("The API server is Kubernetes 1.%d, whose device taints are alpha and off by default", m))
	}
	if countersOffByDefault(m) {
		a.withdrawCounterDevices(fmt.Sprintf("The API server is Kubernetes 1.%d, whose partitionable devices (shared counters) are alpha and off by default", m))
	}
	a.probeServer(ctx, driver, taint)
}

// countersOffByDefault reports whether the API server of Kubernetes
// 1.<minor> takes no shared counters with its default gates
// (DRAPartitionableDevices: alpha before 1.36, and 1.34 does not take them
// in slices of their own at all); 0 is unknown.
func countersOffByDefault(minor int) bool { return minor != 0 && minor < 36 }

// startPublisher starts the driver's publisher and publishes its current
// inventory; the publisher adopts the slices already stored, so an
// unchanged inventory writes nothing.
func (a *Agent) startPublisher(ctx context.Context, d *driver) error {
	if a.standalone {
		return nil
	}
	a.learnServer(ctx, d.name, d.taints.taint)
	pub, err := a.newPublisher(d)
	if err != nil {
		return err
	}
	if err := pub.Start(ctx); err != nil {
		return fmt.Errorf("driver %s: starting the ResourceSlice publisher: %w", d.name, err)
	}
	a.drivers.mu.Lock()
	defer a.drivers.mu.Unlock()
	d.publisher = pub
	if d.taints.haveOwn && !d.taints.waiting {
		a.publishLocked(d)
	}
	return nil
}

func (a *Agent) onInventory(plugin string, inv inventory.Inventory) {
	a.drivers.mu.Lock()
	defer a.drivers.mu.Unlock()
	d, ok := a.drivers.byPlugin[plugin]
	if !ok {
		a.drivers.pending[plugin] = inv // the driver is registered after Launch returns
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
	inv := d.taints.published(a.drivers.withdraw)
	if a.drivers.noCounters {
		var n int
		inv, n = inventory.WithoutSharedCounters(inv)
		d.countersWithdrawn.Store(int64(n))
	}
	if d.publisher != nil {
		if err := inventory.ValidateForKubernetes(inv, int(a.client.minor.Load())); err != nil {
			// Sent, it would be refused on every retry, or stored without
			// what the driver meant: nothing is written until it changes.
			a.log.Error(err, "Inventory not published: the API server is too old for it", "driver", d.name)
			return
		}
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
	a.drivers.mu.Lock()
	d, ok := a.drivers.byPlugin[plugin]
	if ok {
		a.healthLocked(d, h)
	} else {
		a.drivers.health[plugin] = h
	}
	a.drivers.mu.Unlock()
	if ok {
		d.healthy.set(h)
	}
}

// stopPublishers stops the drivers' slice publishers; the slices stay
// published for the next instance to adopt.
func (a *Agent) stopPublishers(drivers []*driver) {
	a.drivers.mu.Lock()
	var pubs []*sliceclient.Publisher
	for _, d := range drivers {
		if d.publisher != nil {
			pubs = append(pubs, d.publisher)
		}
	}
	a.drivers.mu.Unlock()
	for _, p := range pubs {
		p.Stop()
	}
}
