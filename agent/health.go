package agent

import (
	"maps"
	"slices"
	"sync/atomic"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
)

// healthTaints is what a driver's device health does to its slices: the
// devices its plugin last reported unhealthy get the driver's health taint
// (inventory.ApplyHealthTaints) on top of the plugin's own inventory. The
// agent's mutex guards it.
type healthTaints struct {
	own       inventory.Inventory // the plugin's latest inventory, as sent
	haveOwn   bool
	unhealthy map[inventory.DeviceID]bool
	taint     resourceapi.DeviceTaint
	tainted   atomic.Int64 // devices of the published inventory with the taint, for the metric
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
	log.Info("Unhealthy devices changed: tainting them in the ResourceSlices", "unhealthy", names)
	h.unhealthy = next
	return true
}

// published is the inventory to publish: the plugin's own with the
// unhealthy devices tainted.
func (h *healthTaints) published() inventory.Inventory {
	inv, n := inventory.ApplyHealthTaints(h.own, h.unhealthy, h.taint)
	h.tainted.Store(int64(n))
	return inv
}
