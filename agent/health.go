package agent

import (
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
)

// firstHealthWait bounds how long a driver whose plugin reports health
// waits for the plugin's first health snapshot before it publishes the
// plugin's inventory. The plugin sends its inventory and its health on two
// streams; publishing the inventory first would clear the taints of
// devices that are still unhealthy (after an agent restart, or a start
// with a bad device) for a moment in which the scheduler may allocate
// them, and cost two writes where none or one is due.
const firstHealthWait = 5 * time.Second

// inventoryLocked takes the plugin's new inventory and publishes it, with
// its health taints, unless the first health snapshot is still awaited.
func (a *Agent) inventoryLocked(d *driver, inv inventory.Inventory) {
	d.taints.own, d.taints.haveOwn = inv, true
	if !d.taints.waiting {
		a.publishLocked(d)
	}
}

// healthLocked takes a health snapshot and republishes the inventory when
// the set of unhealthy devices changed or this is the snapshot the first
// publish waited for.
func (a *Agent) healthLocked(d *driver, snap []pluginmgr.DeviceHealth) {
	changed := d.taints.setHealth(a.log.WithValues("driver", d.name), snap)
	if d.taints.waiting {
		d.taints.waiting, changed = false, true
	}
	if changed && d.taints.haveOwn {
		a.publishLocked(d)
	}
}

// awaitFirstHealthLocked holds back the first publish until the plugin's
// first health snapshot, at most firstHealthWait: a plugin that claims to
// report health and does not still gets its devices published.
func (a *Agent) awaitFirstHealthLocked(d *driver) {
	d.taints.waiting = true
	time.AfterFunc(firstHealthWait, func() {
		a.drivers.mu.Lock()
		defer a.drivers.mu.Unlock()
		if !d.taints.waiting || a.life.stopping.Load() {
			return
		}
		a.log.Info("No health report from the plugin yet: publishing its devices without health taints", "driver", d.name, "waited", firstHealthWait)
		d.taints.waiting = false
		if d.taints.haveOwn {
			a.publishLocked(d)
		}
	})
}

// healthTaints is what a driver's device health does to its slices: the
// devices its plugin last reported unhealthy get the driver's health taint
// (inventory.ApplyHealthTaints) on top of the plugin's own inventory. The
// agent's mutex guards it.
type healthTaints struct {
	own       inventory.Inventory // the plugin's latest inventory, as sent
	haveOwn   bool
	waiting   bool // for the plugin's first health snapshot before the first publish
	unhealthy map[inventory.DeviceID]bool
	taint     resourceapi.DeviceTaint
	tainted   atomic.Int64 // devices of the published inventory with the taint, for the metric
	withdrawn atomic.Int64 // unhealthy devices left out of the published inventory, for the metric
}

// setHealth takes a health snapshot and reports whether the set of
// unhealthy devices changed; only then do the slices change. Devices the
// snapshot does not name, and those of unknown health, are not tainted: a
// taint stops allocations, and only a device known to be bad should lose
// them.
func (h *healthTaints) setHealth(log logr.Logger, snap []pluginmgr.DeviceHealth) bool {
	next := map[inventory.DeviceID]bool{}
	for _, dh := range snap {
		if dh.Status == pluginmgr.Unhealthy {
			next[inventory.DeviceID{Pool: dh.Pool, Device: dh.Device}] = true
		}
	}
	if maps.Equal(next, h.unhealthy) {
		return false
	}
	var names []string
	for id := range next {
		names = append(names, id.Pool+"/"+id.Device)
	}
	slices.Sort(names)
	log.Info("Unhealthy devices changed: keeping them from new allocations in the ResourceSlices", "unhealthy", names)
	h.unhealthy = next
	return true
}

// published is the inventory to publish: the plugin's own with the
// unhealthy devices tainted or, where the API server keeps no device
// taints (withdraw), left out.
func (h *healthTaints) published(withdraw bool) inventory.Inventory {
	if withdraw {
		inv, n := inventory.WithdrawDevices(h.own, h.unhealthy)
		h.tainted.Store(0)
		h.withdrawn.Store(int64(n))
		return inv
	}
	inv, n := inventory.ApplyHealthTaints(h.own, h.unhealthy, h.taint)
	h.tainted.Store(int64(n))
	h.withdrawn.Store(0)
	return inv
}

// taintsOffByDefault reports whether device taints are off by default on
// the API server of Kubernetes 1.<minor> (DRADeviceTaints: alpha before
// 1.36, beta and on in 1.36, GA in 1.37); 0 is unknown.
func taintsOffByDefault(minor int) bool { return minor != 0 && minor < 36 }

// withdrawUnhealthy makes every driver leave its unhealthy devices out of
// its slices, as drivers did before taints, and put them back when
// healthy, for the rest of the process's life: a taint would not keep the
// scheduler from giving such a device to a new pod. It is called when the
// API server stored a slice without the device taints sent (it keeps none:
// DRADeviceTaints off), and at the start of a publisher when the server's
// minor has them off by default (taintsOffByDefault), so that an agent
// that starts while a device is unhealthy never publishes it untainted.
// The first call says so and republishes; later ones do nothing, so a
// server that drops taints costs one write per change, never a loop (a
// slice without taints loses nothing the server could drop again).
func (a *Agent) withdrawUnhealthy(why string) {
	a.adaptToServer(&a.drivers.withdraw,
		why+": unhealthy devices are left out of the ResourceSlices instead of tainted, and put back when healthy")
}

// withdrawCounterDevices makes every driver publish its devices that
// consume shared counters only as far as they fit together, without the
// counters (inventory.WithoutSharedCounters), for the rest of the
// process's life: the API server takes no shared counters (before 1.35),
// has them off by default (1.35) or stored a slice without them, and
// would otherwise publish a whole GPU and its partitions as independent
// devices. Like withdrawUnhealthy, the first call says so and republishes.
func (a *Agent) withdrawCounterDevices(why string) {
	a.adaptToServer(&a.drivers.noCounters,
		why+": devices that consume shared counters are published only as far as they fit together, without the counters (a whole GPU, not its partitions)")
}

// adaptToServer sets flag, one of the drivers' flags that say what the
// API server cannot hold, once, under the drivers' lock: the first call
// logs what and republishes every driver; later ones, and calls while
// stopping, do nothing.
func (a *Agent) adaptToServer(flag *bool, what string) {
	a.drivers.mu.Lock()
	defer a.drivers.mu.Unlock()
	if *flag || a.life.stopping.Load() {
		return
	}
	*flag = true
	a.log.Info(what)
	for _, d := range a.drivers.byName {
		a.publishLocked(d)
	}
}
