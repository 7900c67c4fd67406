package inventory

import (
	resourceapi "k8s.io/api/resource/v1"
)

// Inventory is everything one driver has on one node: the complete desired
// state, not a delta. Each inventory replaces the previous one; pools not in
// it are removed from the API server.
type Inventory struct {
	Pools []Pool
}

// Pool is one resource pool of the driver on this node. Devices are
// published in this order (the scheduler prefers earlier devices), split over
// as many slices as the API's per-slice limits need.
type Pool struct {
	// Name is the pool name: one or more DNS labels joined by "/", at most
	// 253 characters.
	Name string
	// Devices of the pool; names are unique within the pool.
	Devices []resourceapi.Device
	// SharedCounters are counter sets that the devices consume from. They are
	// published in slices of their own (the API forbids mixing them with
	// devices), at most 8 per slice.
	SharedCounters []resourceapi.CounterSet
}

// DeepCopy returns a copy that shares no memory with inv.
func (inv Inventory) DeepCopy() Inventory {
	out := Inventory{Pools: make([]Pool, len(inv.Pools))}
	for i, p := range inv.Pools {
		q := Pool{Name: p.Name}
		if p.Devices != nil {
			q.Devices = make([]resourceapi.Device, len(p.Devices))
			for j := range p.Devices {
				p.Devices[j].DeepCopyInto(&q.Devices[j])
			}
		}
		if p.SharedCounters != nil {
			q.SharedCounters = make([]resourceapi.CounterSet, len(p.SharedCounters))
			for j := range p.SharedCounters {
				p.SharedCounters[j].DeepCopyInto(&q.SharedCounters[j])
			}
		}
		out.Pools[i] = q
	}
	return out
}
