package claimcache

import (
	"maps"
	"math/big"
	"slices"
)

// Partitionable devices (KEP-4815) are one piece of hardware published
// under several device names — a whole GPU and each of its partitions —
// that consume counters of a counter set of their pool. The scheduler
// allocates a device only while the counters the pool's allocated devices
// consume, with the new device's, stay within each counter's value; the
// node keeps the same rule against the devices it holds (a force-deleted
// pod's claim still prepared here is deallocated for the scheduler):
// counterConflictLocked adds, per counter, what the devices other claims
// hold consume (each device once, however many claims or shares hold it)
// and what the claim's devices consume, and refuses the device that takes
// a counter past its value in the driver's latest inventory.
//
// What a device consumes is what Published says now, or, for a device the
// inventory no longer lists, what it said last in this process
// (Cache.lastConsumed): the record keeps no consumption (that would be new
// durable state for a case only a plugin that changes its inventory under
// a held device meets), so a device held by a record restored at Open that
// the inventory no longer lists consumes nothing — as for the scheduler,
// which counts from the same inventory.

// poolKey names one pool of one driver: counter sets belong to a pool.
type poolKey struct{ driver, pool string }

// counterKey names one counter of one counter set of a pool.
type counterKey struct{ driver, pool, set, counter string }

// answers are what Published said of the devices Hold asked about, each
// once. A claim's few devices fit the array Hold keeps them in on its
// stack, so that asking costs a plain claim no allocation; the devices
// other claims hold beside counter-consuming ones may grow it.
type answers []answer

type answer struct {
	k deviceKey
	p PublishedDevice
}

// ask appends published's answer for k.
func (as answers) ask(published Published, k deviceKey) answers {
	return append(as, answer{k, published(k.driver, k.pool, k.device)})
}

// get returns the answer for k, if Hold asked.
func (as answers) get(k deviceKey) (PublishedDevice, bool) {
	for _, a := range as {
		if a.k == k {
			return a.p, true
		}
	}
	return PublishedDevice{}, false
}

// consumedLocked is what device k consumes: as published now, or as last
// published if the inventory no longer lists it; nothing if Hold has no
// Published to ask.
func (c *Cache) consumedLocked(k deviceKey, asked answers) CounterAmounts {
	p, ok := asked.get(k)
	switch {
	case !ok:
		return nil
	case p.Listed:
		return p.ConsumesCounters
	}
	return c.lastConsumed[k]
}

// countingPoolsLocked returns the pools whose counters the claim's
// devices consume, nil when none do (the common case, with no allocation).
func (c *Cache) countingPoolsLocked(drivers map[string][]Device, asked answers) map[poolKey]bool {
	var pools map[poolKey]bool
	for driver, devs := range drivers {
		for _, d := range devs {
			if d.AdminAccess || len(c.consumedLocked(deviceKey{driver, d.Pool, d.Device}, asked)) == 0 {
				continue
			}
			if pools == nil {
				pools = map[poolKey]bool{}
			}
			pools[poolKey{driver, d.Pool}] = true
		}
	}
	return pools
}

// othersHolding returns the holders of a device other than the claim.
func othersHolding(ref ClaimRef, hs []holder) []holder {
	var out []holder
	for _, o := range hs {
		if o.claim.UID != ref.UID {
			out = append(out, o)
		}
	}
	return out
}

// unaskedLocked returns the devices other claims hold in the pools whose
// counters the claim's devices consume that Hold has not asked about yet.
func (c *Cache) unaskedLocked(ref ClaimRef, drivers map[string][]Device, asked answers) []deviceKey {
	pools := c.countingPoolsLocked(drivers, asked)
	if pools == nil {
		return nil
	}
	var out []deviceKey
	for k, hs := range c.holders {
		if _, done := asked.get(k); done || !pools[poolKey{k.driver, k.pool}] || len(othersHolding(ref, hs)) == 0 {
			continue
		}
		out = append(out, k)
	}
	return out
}

// learnLocked keeps what the inventory said the devices Hold asked about
// consume, for when it no longer lists them.
func (c *Cache) learnLocked(asked answers) {
	for _, a := range asked {
		switch {
		case !a.p.Listed:
		case len(a.p.ConsumesCounters) > 0:
			c.lastConsumed[a.k] = a.p.ConsumesCounters
		default:
			delete(c.lastConsumed, a.k)
		}
	}
}

// counterUse is what the devices held so far consume of one counter, and
// the holder to name if it is exceeded.
type counterUse struct {
	sum          *big.Rat
	holder       *holder // nil while only the claim's own devices consume it
	holderDevice string
}

// counterConflictLocked returns the error for the first of the claim's
// devices (by driver name, then in order) whose counters, added to what
// the devices other claims hold consume and what the claim's earlier
// devices consume, exceed a counter's published value.
func (c *Cache) counterConflictLocked(ref ClaimRef, drivers map[string][]Device, asked answers) error {
	pools := c.countingPoolsLocked(drivers, asked)
	if pools == nil {
		return nil
	}
	uses := map[counterKey]*counterUse{}
	counted := map[deviceKey]bool{}
	add := func(k deviceKey, consumed CounterAmounts, by *holder) []counterKey {
		var added []counterKey
		for _, set := range slices.Sorted(maps.Keys(consumed)) {
			for _, counter := range slices.Sorted(maps.Keys(consumed[set])) {
				ck := counterKey{k.driver, k.pool, set, counter}
				u := uses[ck]
				if u == nil {
					u = &counterUse{sum: new(big.Rat)}
					uses[ck] = u
				}
				u.sum.Add(u.sum, consumed[set][counter])
				if by != nil && (u.holder == nil || compareRefs(by.claim, u.holder.claim) < 0 ||
					(by.claim == u.holder.claim && k.device < u.holderDevice)) {
					u.holder, u.holderDevice = by, k.device
				}
				added = append(added, ck)
			}
		}
		return added
	}
	for k, hs := range c.holders {
		if !pools[poolKey{k.driver, k.pool}] {
			continue
		}
		others := othersHolding(ref, hs)
		if len(others) == 0 {
			continue
		}
		slices.SortFunc(others, func(a, b holder) int { return compareRefs(a.claim, b.claim) })
		counted[k] = true
		add(k, c.consumedLocked(k, asked), &others[0])
	}
	for _, driver := range slices.Sorted(maps.Keys(drivers)) {
		for _, d := range drivers[driver] {
			k := deviceKey{driver, d.Pool, d.Device}
			if d.AdminAccess || counted[k] {
				continue
			}
			counted[k] = true
			listed, _ := asked.get(k)
			values := listed.CounterValues // of a device not listed: none, not checked
			for _, ck := range add(k, c.consumedLocked(k, asked), nil) {
				u := uses[ck]
				value := values[ck.set][ck.counter]
				if u.holder == nil || value == nil || u.sum.Cmp(value) <= 0 {
					continue
				}
				return &DeviceInUseError{
					Driver: driver, Pool: d.Pool, Device: d.Device, ShareID: d.ShareID, Claim: ref,
					Holder: u.holder.claim, HolderState: u.holder.state, HolderUncertain: u.holder.uncertain,
					CounterSet: ck.set, Counter: ck.counter, HolderDevice: u.holderDevice,
				}
			}
		}
	}
	return nil
}
