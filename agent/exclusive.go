package agent

import (
	"errors"
	"math/big"

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
// #141471): the node is the last line of defence. A partition of a GPU
// another claim holds whole (devices consuming the same counters, past
// their published values) is refused the same way. Admin access and
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
	h, err := a.record.Cache().Hold(ref, allocated, a.published)
	if err != nil {
		var inUse *claimcache.DeviceInUseError
		if errors.As(err, &inUse) && a.metrics != nil {
			a.metrics.prepareRefused.WithLabelValues(inUse.Driver, refusedDeviceInUse).Inc()
		}
		return nil, err
	}
	return h, nil
}

// published says how the driver's plugin publishes the device in its
// latest inventory, read under the drivers' mutex: whether it is published
// with allowMultipleAllocations (only then may two claims hold shares of
// it, distinct share IDs) and what it consumes of its pool's counter sets
// (a whole GPU and its partitions are the same hardware: claimcache.Hold
// keeps their counters within the published values). The agent knows it
// from the inventory it publishes, not from the claim, so that a share ID
// on a device published for one claim at a time does not open it to a
// second; a device the plugin no longer publishes is not listed, and Hold
// counts what it last consumed.
func (a *Agent) published(driverName, pool, device string) claimcache.PublishedDevice {
	a.drivers.mu.Lock()
	defer a.drivers.mu.Unlock()
	d := a.drivers.byName[driverName]
	if d == nil {
		return claimcache.PublishedDevice{}
	}
	for i := range d.taints.own.Pools {
		p := &d.taints.own.Pools[i]
		if p.Name != pool {
			continue
		}
		for j := range p.Devices {
			if p.Devices[j].Name == device {
				return publishedDevice(&p.Devices[j], p.SharedCounters)
			}
		}
	}
	return claimcache.PublishedDevice{}
}

// publishedDevice is what a listed device consumes of its pool's counter
// sets, and the values of those counters.
func publishedDevice(dev *resourcev1.Device, sets []resourcev1.CounterSet) claimcache.PublishedDevice {
	out := claimcache.PublishedDevice{Listed: true, AllowMultipleAllocations: dev.AllowMultipleAllocations != nil && *dev.AllowMultipleAllocations}
	for _, consumed := range dev.ConsumesCounters {
		if out.ConsumesCounters == nil {
			out.ConsumesCounters, out.CounterValues = claimcache.CounterAmounts{}, claimcache.CounterAmounts{}
		}
		out.ConsumesCounters[consumed.CounterSet] = exactCounters(consumed.Counters)
		for _, set := range sets {
			if set.Name == consumed.CounterSet {
				out.CounterValues[set.Name] = exactCounters(set.Counters)
			}
		}
	}
	return out
}

// exactCounters converts counter quantities to exact rationals, as the
// scheduler compares them (resource.Quantity's arithmetic is exact).
func exactCounters(counters map[string]resourcev1.Counter) map[string]*big.Rat {
	out := make(map[string]*big.Rat, len(counters))
	for name, c := range counters {
		q := c.Value // a copy: AsDec changes the quantity it is called on
		if v, ok := q.AsInt64(); ok {
			out[name] = new(big.Rat).SetInt64(v)
		} else if r, ok := new(big.Rat).SetString(q.AsDec().String()); ok {
			out[name] = r
		}
	}
	return out
}
