package agent

import (
	"errors"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/pluginmgr"
)

// refusedDeviceInUse is the reason label of dranode_prepare_refused_total
// for a device another claim holds.
const refusedDeviceInUse = "device_in_use"

// holdDevices holds, in the record, every device the claim's allocation
// names for the drivers this agent hosts, before any plugin is called: a
// device that another claim holds — recorded in any state, uncertain or
// stale entries included, or being prepared right now — refuses the
// prepare with a *claimcache.DeviceInUseError naming the device and that
// claim, which the kubelet shows in the pod's events and retries. The
// scheduler never gives a device to two claims at once, but a
// force-deleted pod's containers may still run, and its claim still be
// prepared here, when the device's next claim comes (kubernetes/kubernetes
// #141471): the node is the last line of defence. Admin access and
// distinct shares of a device the driver publishes with
// allowMultipleAllocations are what Kubernetes allows beside another claim
// (claimcache.Hold); the caller releases the hold once the outcome is
// recorded.
func (a *Agent) holdDevices(ref claimcache.ClaimRef, claim *resourcev1.ResourceClaim, hosted []string) (*claimcache.Hold, error) {
	allocated := make(map[string][]claimcache.Device, len(hosted))
	for _, r := range claim.Status.Allocation.Devices.Results {
		if a.driver(r.Driver) == nil {
			continue
		}
		allocated[r.Driver] = append(allocated[r.Driver], claimcache.Device{Pool: r.Pool, Device: r.Device, Requests: []string{r.Request},
			ShareID: pluginmgr.ShareID(r), AdminAccess: pluginmgr.AdminAccess(r)})
	}
	h, err := a.record.cache.Hold(ref, allocated, a.shareable)
	if err != nil {
		var inUse *claimcache.DeviceInUseError
		if errors.As(err, &inUse) && a.metrics != nil {
			a.metrics.prepareRefused.WithLabelValues(inUse.Driver, refusedDeviceInUse).Inc()
		}
		return nil, err
	}
	return h, nil
}

// shareable reports whether the driver's plugin publishes the device with
// allowMultipleAllocations in its latest inventory: only then may two
// claims hold shares of it (distinct share IDs). The agent knows it from
// the inventory it publishes, not from the claim, so that a share ID on a
// device published for one claim at a time does not open it to a second;
// a device the plugin no longer publishes is not shareable.
func (a *Agent) shareable(driverName, pool, device string) bool {
	a.drivers.mu.Lock()
	defer a.drivers.mu.Unlock()
	d := a.drivers.byName[driverName]
	if d == nil {
		return false
	}
	for _, p := range d.taints.own.Pools {
		if p.Name != pool {
			continue
		}
		for _, dev := range p.Devices {
			if dev.Name == device {
				return dev.AllowMultipleAllocations != nil && *dev.AllowMultipleAllocations
			}
		}
	}
	return false
}
