package inventory

import (
	"errors"
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ErrNeedsNewerKubernetes is matched with errors.Is by every
// *NeedsNewerKubernetesError.
var ErrNeedsNewerKubernetes = errors.New("needs a newer Kubernetes")

// NeedsNewerKubernetesError names a field of an inventory that the API
// server of an older Kubernetes minor refuses, or does not know and so
// drops, in a ResourceSlice.
type NeedsNewerKubernetesError struct {
	Field  string // the field's path, e.g. pools[0].devices[2].taints[0].effect
	What   string // what the field holds that the server does not take
	Since  int    // the first minor that takes it (1.<Since>)
	Server int    // the API server's minor (1.<Server>)
}

func (e *NeedsNewerKubernetesError) Error() string {
	return fmt.Sprintf("%s: %s needs Kubernetes 1.%d or newer; the API server is 1.%d", e.Field, e.What, e.Since, e.Server)
}

func (e *NeedsNewerKubernetesError) Is(target error) bool { return target == ErrNeedsNewerKubernetes }

// ValidateForKubernetes reports every field of inv that the API server of
// Kubernetes 1.<minor> would refuse or drop, each a
// *NeedsNewerKubernetesError (joined with errors.Join; nil when there is
// none). A minor of 0 (unknown) or above the newest rule passes everything.
// The rules, read from each release's resource.k8s.io validation and types
// (v1.34.4, v1.35.4, v1.36.3, v1.37.2):
//
//   - a device taint with effect None: 1.35 (1.34 refuses the effect);
//   - shared counters: 1.35 (a publisher puts them in ResourceSlices of
//     their own, which 1.34 does not take: its devices consume only the
//     counters of their own slice);
//   - list-valued attributes (ints, bools, strings, versions): 1.36
//     (an older server drops the list and refuses the attribute left
//     without a value);
//   - nodeAllocatableResources: 1.37 (older servers drop it).
//
// What a server takes but ignores because a feature gate is off is not an
// error here: the server drops it and the publisher reports that once
// (sliceclient.DroppedFieldsError).
func ValidateForKubernetes(inv Inventory, minor int) error {
	if minor == 0 {
		return nil
	}
	var errs []error
	need := func(since int, field, what string) {
		if minor < since {
			errs = append(errs, &NeedsNewerKubernetesError{Field: field, What: what, Since: since, Server: minor})
		}
	}
	for i, p := range inv.Pools {
		pool := fmt.Sprintf("pools[%d]", i)
		if len(p.SharedCounters) > 0 {
			need(35, pool+".sharedCounters", "shared counters in ResourceSlices of their own")
		}
		for j, d := range p.Devices {
			dev := fmt.Sprintf("%s.devices[%d]", pool, j)
			for k, t := range d.Taints {
				if t.Effect == resourceapi.DeviceTaintEffectNone {
					need(35, fmt.Sprintf("%s.taints[%d].effect", dev, k), "taint effect None")
				}
			}
			names := make([]string, 0, len(d.Attributes))
			for name := range d.Attributes {
				names = append(names, string(name))
			}
			slices.Sort(names)
			for _, name := range names {
				a := d.Attributes[resourceapi.QualifiedName(name)]
				if a.IntValues != nil || a.BoolValues != nil || a.StringValues != nil || a.VersionValues != nil {
					need(36, fmt.Sprintf("%s.attributes[%s]", dev, name), "a list-valued attribute")
				}
			}
			if len(d.NodeAllocatableResources) > 0 {
				need(37, dev+".nodeAllocatableResources", "nodeAllocatableResources")
			}
		}
	}
	return errors.Join(errs...)
}

// WithoutSharedCounters returns inv as an API server without shared
// counters can hold it safely, and the number of devices left out. Such a
// server (Kubernetes 1.34, which does not take them in slices of their
// own; 1.35 with DRAPartitionableDevices off, its default, which stores
// slices without them) would otherwise publish the devices that consume
// counters — a whole GPU and its partitions — as independent devices, and
// the scheduler could allocate overlapping ones to different claims.
// So in each pool the counter sets go, and of the devices that consume
// them, those that fit together within the sets' counters are kept
// (without their consumption), in the pool's order, and the others are
// left out: a whole GPU listed before its partitions is kept and its
// partitions go. A device that consumes from a set the pool does not have
// is left out. Devices that consume nothing are kept as they are.
//
// inv is not modified. The result shares with inv the pools it did not
// change; treat both as read-only, or DeepCopy.
func WithoutSharedCounters(inv Inventory) (Inventory, int) {
	withdrawn := 0
	out := inv
	copied := false
	for i, p := range inv.Pools {
		consumes := slices.ContainsFunc(p.Devices, func(d resourceapi.Device) bool { return len(d.ConsumesCounters) > 0 })
		if len(p.SharedCounters) == 0 && !consumes {
			continue
		}
		left := map[string]map[string]resource.Quantity{} // by set, by counter
		for _, set := range p.SharedCounters {
			left[set.Name] = map[string]resource.Quantity{}
			for name, c := range set.Counters {
				left[set.Name][name] = c.Value.DeepCopy()
			}
		}
		kept := make([]resourceapi.Device, 0, len(p.Devices))
		for _, d := range p.Devices {
			if len(d.ConsumesCounters) == 0 {
				kept = append(kept, d)
				continue
			}
			if !fitsCounters(left, d.ConsumesCounters) {
				withdrawn++
				continue
			}
			for _, cc := range d.ConsumesCounters {
				for name, c := range cc.Counters {
					q := left[cc.CounterSet][name]
					q.Sub(c.Value)
					left[cc.CounterSet][name] = q
				}
			}
			d.ConsumesCounters = nil
			kept = append(kept, d)
		}
		if !copied {
			out.Pools = slices.Clone(inv.Pools)
			copied = true
		}
		out.Pools[i].SharedCounters = nil
		out.Pools[i].Devices = kept
	}
	return out, withdrawn
}

// fitsCounters reports whether what consume takes is within what is left.
func fitsCounters(left map[string]map[string]resource.Quantity, consume []resourceapi.DeviceCounterConsumption) bool {
	need := map[string]map[string]resource.Quantity{}
	for _, cc := range consume {
		if _, ok := left[cc.CounterSet]; !ok {
			return false
		}
		if need[cc.CounterSet] == nil {
			need[cc.CounterSet] = map[string]resource.Quantity{}
		}
		for name, c := range cc.Counters {
			q := need[cc.CounterSet][name]
			q.Add(c.Value)
			need[cc.CounterSet][name] = q
		}
	}
	for set, counters := range need {
		for name, q := range counters {
			have, ok := left[set][name]
			if !ok || have.Cmp(q) < 0 {
				return false
			}
		}
	}
	return true
}
