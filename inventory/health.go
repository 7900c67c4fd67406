package inventory

import (
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
)

// DeviceID names one device of an inventory: its pool and its name in the
// pool.
type DeviceID struct {
	Pool, Device string
}

// HealthTaintKey is the taint key for driverName's unhealthy devices,
// "<driverName>/unhealthy": in the driver's own domain, so that a claim can
// tolerate one driver's unhealthy devices without tolerating another's, and
// no other writer of the slices' taints uses it by accident.
func HealthTaintKey(driverName string) string {
	return driverName + "/unhealthy"
}

// HealthTaint returns the taint ApplyHealthTaints should put on
// driverName's unhealthy devices: key HealthTaintKey(driverName), no value,
// the given effect. An effect other than NoSchedule, NoExecute or None (the
// ones the resource.k8s.io/v1 API takes) and a driver name that is not a
// valid driver name are errors matching ErrInvalid. TimeAdded is left unset:
// the API server sets it when the taint first appears.
func HealthTaint(driverName string, effect resourceapi.DeviceTaintEffect) (resourceapi.DeviceTaint, error) {
	if err := ValidateDriverName(driverName); err != nil {
		return resourceapi.DeviceTaint{}, err
	}
	if err := ValidateTaintEffect(effect); err != nil {
		return resourceapi.DeviceTaint{}, err
	}
	return resourceapi.DeviceTaint{Key: HealthTaintKey(driverName), Effect: effect}, nil
}

// ValidateTaintEffect accepts the device taint effects of resource.k8s.io/v1
// (NoSchedule, NoExecute, None); anything else is an error matching
// ErrInvalid that names the effects allowed.
func ValidateTaintEffect(effect resourceapi.DeviceTaintEffect) error {
	switch effect {
	case resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNone:
		return nil
	}
	return fmt.Errorf("%w: device taint effect %q: must be %s, %s or %s", ErrInvalid, effect,
		resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNone)
}

// ApplyHealthTaints returns inv with taint added to every device that
// unhealthy maps to true, and the number of devices of the result that
// carry a taint with taint's key.
//
// It only adds: a device that already has a taint with taint's key (the
// driver's own, or one added before) is left as it is, as is a device that
// already has resourceapi.DeviceTaintsMaxLength taints. So applying it to its
// own result changes nothing, and a device that became healthy again loses
// the taint when the caller applies the new health to the driver's own
// inventory, which is what callers keep and pass here on every change of
// either. Devices unhealthy names that inv does not have are ignored.
//
// inv is not modified. The result shares with inv the pools and devices it
// did not change; treat both as read-only, or DeepCopy.
func ApplyHealthTaints(inv Inventory, unhealthy map[DeviceID]bool, taint resourceapi.DeviceTaint) (Inventory, int) {
	tainted := 0
	out := inv
	copied := false
	for i, p := range inv.Pools {
		var devices []resourceapi.Device
		for j := range p.Devices {
			d := &p.Devices[j]
			has := slices.ContainsFunc(d.Taints, func(t resourceapi.DeviceTaint) bool { return t.Key == taint.Key })
			add := !has && unhealthy[DeviceID{Pool: p.Name, Device: d.Name}] && len(d.Taints) < resourceapi.DeviceTaintsMaxLength
			if has || add {
				tainted++
			}
			if !add {
				continue
			}
			if devices == nil {
				devices = slices.Clone(p.Devices)
			}
			// A new Taints slice: the device's own may be shared with inv.
			devices[j].Taints = append(slices.Clip(d.Taints), taint)
		}
		if devices == nil {
			continue
		}
		if !copied {
			out.Pools = slices.Clone(inv.Pools)
			copied = true
		}
		out.Pools[i].Devices = devices
	}
	return out, tainted
}

// WithdrawDevices returns inv without the devices that unhealthy maps to
// true, and the number of devices left out: how a driver keeps the
// scheduler from allocating a bad device where the API server stores no
// device taints (DRADeviceTaints off: the default of Kubernetes 1.34 and
// 1.35), as drivers did before taints existed. Claims already allocated
// keep the device; only new allocations cannot see it. A pool may be left
// with no devices; it is still published, so the pool does not look gone.
// Devices unhealthy names that inv does not have are ignored.
//
// inv is not modified. The result shares with inv the pools it did not
// change; treat both as read-only, or DeepCopy.
func WithdrawDevices(inv Inventory, unhealthy map[DeviceID]bool) (Inventory, int) {
	withdrawn := 0
	out := inv
	copied := false
	for i, p := range inv.Pools {
		kept := slices.DeleteFunc(slices.Clone(p.Devices), func(d resourceapi.Device) bool {
			return unhealthy[DeviceID{Pool: p.Name, Device: d.Name}]
		})
		if len(kept) == len(p.Devices) {
			continue
		}
		withdrawn += len(p.Devices) - len(kept)
		if !copied {
			out.Pools = slices.Clone(inv.Pools)
			copied = true
		}
		out.Pools[i].Devices = kept
	}
	return out, withdrawn
}
