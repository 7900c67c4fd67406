package agent

import (
	"fmt"
	"os"
	"slices"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/dranode/dranode/cdi"
	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/pluginmgr"
)

// buildSpec turns a plugin's prepared devices into the claim's CDI spec for
// the driver, with one CDI device per prepared device named
// "<claim UID>-<device>", plus "-<share ID>" for a shared device (one
// device allocated several times in a claim) and the pool when two pools
// share a device name. A prepared device is the answer to the first unused
// allocation result of its pool, device, request and, when the plugin says
// (PreparedDevice.ShareID), share.
func buildSpec(driverName, claimUID string, prepared []pluginmgr.PreparedDevice, results []resourcev1.DeviceRequestAllocationResult) (*cdi.Spec, []claimcache.Device, error) {
	spec := &cdi.Spec{Kind: driverName + "/" + cdi.ClaimClass}
	used := make([]bool, len(results))
	shareIDs := make([]string, len(prepared))
	admin := make([]bool, len(prepared)) // recorded, so that the device is not held (claimcache.Hold)
	for i, p := range prepared {
		for j, r := range results {
			if used[j] || r.Pool != p.Pool || r.Device != p.Device || (len(p.Requests) > 0 && !slices.Contains(p.Requests, r.Request)) ||
				(p.ShareID != "" && pluginmgr.ShareID(r) != p.ShareID) {
				continue
			}
			used[j] = true
			shareIDs[i], admin[i] = pluginmgr.ShareID(r), pluginmgr.AdminAccess(r)
			break
		}
	}
	short := func(i int) string {
		if shareIDs[i] != "" {
			return prepared[i].Device + "-" + shareIDs[i]
		}
		return prepared[i].Device
	}
	count := map[string]int{}
	for i := range prepared {
		count[short(i)]++
	}
	var devices []claimcache.Device
	for i, p := range prepared {
		name := claimUID + "-" + short(i)
		if count[short(i)] > 1 {
			name = claimUID + "-" + strings.ReplaceAll(p.Pool, "/", "_") + "-" + short(i)
		}
		if err := cdi.ValidateDeviceName(name); err != nil {
			return nil, nil, fmt.Errorf("driver %s: device %s/%s: %w", driverName, p.Pool, p.Device, err)
		}
		spec.Devices = append(spec.Devices, cdi.Device{Name: name, ContainerEdits: convertEdits(p.Edits)})
		devices = append(devices, claimcache.Device{
			Pool: p.Pool, Device: p.Device, Requests: p.Requests, ShareID: shareIDs[i], AdminAccess: admin[i],
			CDIDeviceIDs: []string{cdi.QualifiedName(driverName, cdi.ClaimClass, name)},
		})
	}
	spec.Version = cdi.MinimumVersion(spec)
	return spec, devices, nil
}

func convertEdits(e pluginmgr.ContainerEdits) cdi.ContainerEdits {
	out := cdi.ContainerEdits{Env: e.Env}
	for _, n := range e.DeviceNodes {
		dn := cdi.DeviceNode{Path: n.Path, HostPath: n.HostPath, Type: n.Type, Major: n.Major, Minor: n.Minor,
			Permissions: n.Permissions, UID: n.UID, GID: n.GID}
		if n.FileMode != nil {
			m := os.FileMode(*n.FileMode)
			dn.FileMode = &m
		}
		out.DeviceNodes = append(out.DeviceNodes, dn)
	}
	for _, m := range e.Mounts {
		out.Mounts = append(out.Mounts, cdi.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Type: m.Type, Options: m.Options})
	}
	for _, h := range e.Hooks {
		hk := cdi.Hook{HookName: h.HookName, Path: h.Path, Args: h.Args, Env: h.Env}
		if h.Timeout != nil {
			t := int(*h.Timeout)
			hk.Timeout = &t
		}
		out.Hooks = append(out.Hooks, hk)
	}
	return out
}

// sweepSpecs removes CDI specs of this agent's drivers for claims that are
// not recorded (left by an agent that wrote specs before recording the
// claim, as earlier versions did, or by hand).
func (a *Agent) sweepSpecs() {
	recorded := map[string]bool{}
	for _, e := range a.record.Cache().List() {
		recorded[e.Claim.UID] = true
	}
	for _, name := range a.Drivers() {
		removed, err := a.specs.Sweep(name, cdi.ClaimClass, func(uid string) bool { return recorded[uid] })
		if err != nil {
			a.log.Error(err, "Sweeping CDI specs", "driver", name)
		}
		if len(removed) > 0 {
			a.log.Info("Removed CDI specs of unrecorded claims", "driver", name, "files", removed)
		}
		gone, err := sweepMetadata(a.cfg.Kubelet.PluginsDir, name, func(uid string) bool { return recorded[uid] })
		if err != nil {
			a.log.Error(err, "Sweeping device metadata", "driver", name)
		}
		if len(gone) > 0 {
			a.log.Info("Removed device metadata of unrecorded claims", "driver", name, "claims", gone)
		}
	}
}
