package inventory

import (
	"errors"
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
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
