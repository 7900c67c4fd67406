package pluginmgr

import (
	"errors"
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dranode/dranode/inventory"
	pb "github.com/dranode/dranode/pluginmgr/proto/dranode/plugin/v1"
)

// Kubernetes objects cross the wire in their own protobuf encoding (see the
// .proto file for why); these helpers are the only place that knows it.

type kubeMessage interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

func marshalEach[T any, P interface {
	*T
	kubeMessage
}](items []T, what string) ([][]byte, error) {
	if len(items) == 0 {
		return nil, nil
	}
	out := make([][]byte, len(items))
	for i := range items {
		b, err := P(&items[i]).Marshal()
		if err != nil {
			return nil, fmt.Errorf("encoding %s %d: %w", what, i, err)
		}
		out[i] = b
	}
	return out, nil
}

func unmarshalEach[T any, P interface {
	*T
	kubeMessage
}](raw [][]byte, what string) ([]T, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	out := make([]T, len(raw))
	for i, b := range raw {
		if err := P(&out[i]).Unmarshal(b); err != nil {
			return nil, fmt.Errorf("%w: decoding %s %d: %v", ErrInvalidResponse, what, i, err)
		}
	}
	return out, nil
}

func inventoryToWire(inv inventory.Inventory) (*pb.Inventory, error) {
	out := &pb.Inventory{Pools: make([]*pb.Pool, 0, len(inv.Pools))}
	for _, p := range inv.Pools {
		devices, err := marshalEach(p.Devices, "device")
		if err != nil {
			return nil, fmt.Errorf("pool %q: %w", p.Name, err)
		}
		counters, err := marshalEach(p.SharedCounters, "counter set")
		if err != nil {
			return nil, fmt.Errorf("pool %q: %w", p.Name, err)
		}
		out.Pools = append(out.Pools, &pb.Pool{Name: p.Name, Devices: devices, SharedCounters: counters})
	}
	return out, nil
}

// InventoryFromWire decodes an inventory message. It is exported for tools
// that read the protocol directly; errors match ErrInvalidResponse.
func InventoryFromWire(in *pb.Inventory) (inventory.Inventory, error) {
	inv := inventory.Inventory{Pools: make([]inventory.Pool, 0, len(in.GetPools()))}
	for _, p := range in.GetPools() {
		devices, err := unmarshalEach[resourcev1.Device](p.GetDevices(), "device")
		if err != nil {
			return inventory.Inventory{}, fmt.Errorf("pool %q: %w", p.GetName(), err)
		}
		counters, err := unmarshalEach[resourcev1.CounterSet](p.GetSharedCounters(), "counter set")
		if err != nil {
			return inventory.Inventory{}, fmt.Errorf("pool %q: %w", p.GetName(), err)
		}
		inv.Pools = append(inv.Pools, inventory.Pool{Name: p.GetName(), Devices: devices, SharedCounters: counters})
	}
	return inv, nil
}

func claimsToWire(claims []Claim) ([]*pb.Claim, error) {
	out := make([]*pb.Claim, len(claims))
	for i, c := range claims {
		results, err := marshalEach(c.Results, "allocation result")
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", c.UID, err)
		}
		configs, err := marshalEach(c.Configs, "device configuration")
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", c.UID, err)
		}
		out[i] = &pb.Claim{Uid: string(c.UID), Namespace: c.Namespace, Name: c.Name, Results: results, Configs: configs}
	}
	return out, nil
}

func claimsFromWire(in []*pb.Claim) ([]Claim, error) {
	out := make([]Claim, len(in))
	for i, c := range in {
		results, err := unmarshalEach[resourcev1.DeviceRequestAllocationResult](c.GetResults(), "allocation result")
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", c.GetUid(), err)
		}
		configs, err := unmarshalEach[resourcev1.DeviceAllocationConfiguration](c.GetConfigs(), "device configuration")
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", c.GetUid(), err)
		}
		out[i] = Claim{UID: types.UID(c.GetUid()), Namespace: c.GetNamespace(), Name: c.GetName(), Results: results, Configs: configs}
	}
	return out, nil
}

func devicesToWire(devs []PreparedDevice) ([]*pb.PreparedDevice, error) {
	out := make([]*pb.PreparedDevice, len(devs))
	for i, d := range devs {
		out[i] = &pb.PreparedDevice{Pool: d.Pool, Device: d.Device, Requests: d.Requests, Edits: editsToWire(d.Edits), ShareId: d.ShareID, AdminAccess: d.AdminAccess}
		if d.Status != nil {
			b, err := d.Status.Marshal()
			if err != nil {
				return nil, fmt.Errorf("encoding the status of device %s/%s: %w", d.Pool, d.Device, err)
			}
			out[i].Status = b
		}
	}
	return out, nil
}

// devicesFromWire decodes prepared devices. An empty status is no status:
// plugins built before the field existed never send it.
func devicesFromWire(in []*pb.PreparedDevice) ([]PreparedDevice, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]PreparedDevice, len(in))
	for i, d := range in {
		out[i] = PreparedDevice{Pool: d.GetPool(), Device: d.GetDevice(), Requests: d.GetRequests(), Edits: editsFromWire(d.GetEdits()),
			ShareID: d.GetShareId(), AdminAccess: d.GetAdminAccess()}
		if raw := d.GetStatus(); len(raw) > 0 {
			var st resourcev1.AllocatedDeviceStatus
			if err := st.Unmarshal(raw); err != nil {
				return nil, fmt.Errorf("%w: decoding the status of device %s/%s: %v", ErrInvalidResponse, d.GetPool(), d.GetDevice(), err)
			}
			out[i].Status = &st
		}
	}
	return out, nil
}

func optional[T any](v T, set bool) *T {
	if !set {
		return nil
	}
	return &v
}

func deref[T any](p *T) (T, bool) {
	var zero T
	if p == nil {
		return zero, false
	}
	return *p, true
}

func editsToWire(e ContainerEdits) *pb.ContainerEdits {
	out := &pb.ContainerEdits{Env: e.Env}
	for _, n := range e.DeviceNodes {
		mode, hasMode := deref(n.FileMode)
		uid, hasUID := deref(n.UID)
		gid, hasGID := deref(n.GID)
		out.DeviceNodes = append(out.DeviceNodes, &pb.DeviceNode{
			Path: n.Path, HostPath: n.HostPath, Type: n.Type, Major: n.Major, Minor: n.Minor,
			FileMode: mode, HasFileMode: hasMode, Permissions: n.Permissions,
			Uid: uid, HasUid: hasUID, Gid: gid, HasGid: hasGID,
		})
	}
	for _, m := range e.Mounts {
		out.Mounts = append(out.Mounts, &pb.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Type: m.Type, Options: m.Options})
	}
	for _, h := range e.Hooks {
		timeout, hasTimeout := deref(h.Timeout)
		out.Hooks = append(out.Hooks, &pb.Hook{HookName: h.HookName, Path: h.Path, Args: h.Args, Env: h.Env, TimeoutSeconds: timeout, HasTimeout: hasTimeout})
	}
	return out
}

func editsFromWire(in *pb.ContainerEdits) ContainerEdits {
	out := ContainerEdits{Env: in.GetEnv()}
	for _, n := range in.GetDeviceNodes() {
		out.DeviceNodes = append(out.DeviceNodes, DeviceNode{
			Path: n.GetPath(), HostPath: n.GetHostPath(), Type: n.GetType(), Major: n.GetMajor(), Minor: n.GetMinor(),
			FileMode: optional(n.GetFileMode(), n.GetHasFileMode()), Permissions: n.GetPermissions(),
			UID: optional(n.GetUid(), n.GetHasUid()), GID: optional(n.GetGid(), n.GetHasGid()),
		})
	}
	for _, m := range in.GetMounts() {
		out.Mounts = append(out.Mounts, Mount{HostPath: m.GetHostPath(), ContainerPath: m.GetContainerPath(), Type: m.GetType(), Options: m.GetOptions()})
	}
	for _, h := range in.GetHooks() {
		out.Hooks = append(out.Hooks, Hook{HookName: h.GetHookName(), Path: h.GetPath(), Args: h.GetArgs(), Env: h.GetEnv(), Timeout: optional(h.GetTimeoutSeconds(), h.GetHasTimeout())})
	}
	return out
}

func preparedClaimsToWire(claims []PreparedClaim) ([]*pb.PreparedClaim, error) {
	out := make([]*pb.PreparedClaim, len(claims))
	for i, c := range claims {
		devices, err := devicesToWire(c.Devices)
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", c.UID, err)
		}
		out[i] = &pb.PreparedClaim{Uid: string(c.UID), Namespace: c.Namespace, Name: c.Name, Devices: devices}
	}
	return out, nil
}

func preparedClaimsFromWire(in []*pb.PreparedClaim) ([]PreparedClaim, error) {
	out := make([]PreparedClaim, len(in))
	for i, c := range in {
		devices, err := devicesFromWire(c.GetDevices())
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", c.GetUid(), err)
		}
		out[i] = PreparedClaim{UID: types.UID(c.GetUid()), Namespace: c.GetNamespace(), Name: c.GetName(), Devices: devices}
	}
	return out, nil
}

// prepareResultsFromWire matches the plugin's answers to the request.
func prepareResultsFromWire(claims []Claim, in []*pb.ClaimPrepareResult) ([]PrepareResult, error) {
	uids, answers, err := matchByUID(claims, func(c Claim) types.UID { return c.UID }, in)
	if err != nil {
		return nil, err
	}
	out := make([]PrepareResult, len(claims))
	for i, r := range answers {
		if r.GetError() != "" {
			out[i] = PrepareResult{ClaimUID: uids[i], Err: &ClaimError{ClaimUID: string(uids[i]), Message: r.GetError()}}
			continue
		}
		devices, err := devicesFromWire(r.GetDevices())
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", uids[i], err)
		}
		out[i] = PrepareResult{ClaimUID: uids[i], Devices: devices}
	}
	return out, nil
}

// unprepareResultsFromWire matches the plugin's answers to the request.
func unprepareResultsFromWire(claims []PreparedClaim, in []*pb.ClaimUnprepareResult) ([]UnprepareResult, error) {
	uids, answers, err := matchByUID(claims, func(c PreparedClaim) types.UID { return c.UID }, in)
	if err != nil {
		return nil, err
	}
	out := make([]UnprepareResult, len(claims))
	for i, r := range answers {
		out[i] = UnprepareResult{ClaimUID: uids[i]}
		if r.GetError() != "" {
			out[i].Err = &ClaimError{ClaimUID: string(uids[i]), Message: r.GetError()}
		}
	}
	return out, nil
}

// matchByUID returns the UIDs of the claims asked about and the plugin's
// answers in their order: every claim must be answered exactly once, and
// nothing else.
func matchByUID[C any, R interface{ GetUid() string }](claims []C, uidOf func(C) types.UID, in []R) ([]types.UID, []R, error) {
	asked := make([]types.UID, len(claims))
	for i, c := range claims {
		asked[i] = uidOf(c)
	}
	byUID := make(map[string]R, len(in))
	for _, r := range in {
		if _, dup := byUID[r.GetUid()]; dup {
			return nil, nil, fmt.Errorf("%w: claim %s answered twice", ErrInvalidResponse, r.GetUid())
		}
		byUID[r.GetUid()] = r
	}
	out := make([]R, len(asked))
	var errs []error
	for i, uid := range asked {
		r, ok := byUID[string(uid)]
		if !ok {
			errs = append(errs, fmt.Errorf("%w: no result for claim %s", ErrInvalidResponse, uid))
			continue
		}
		delete(byUID, string(uid))
		out[i] = r
	}
	for uid := range byUID {
		errs = append(errs, fmt.Errorf("%w: result for claim %s that was not asked for", ErrInvalidResponse, uid))
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return asked, out, nil
}

func healthToWire(hs []DeviceHealth) *pb.HealthSnapshot {
	out := &pb.HealthSnapshot{Devices: make([]*pb.DeviceHealth, len(hs))}
	for i, h := range hs {
		out.Devices[i] = &pb.DeviceHealth{Pool: h.Pool, Device: h.Device, Status: pb.HealthStatus(h.Status), Message: h.Message}
	}
	return out
}

func healthFromWire(in *pb.HealthSnapshot) []DeviceHealth {
	out := make([]DeviceHealth, len(in.GetDevices()))
	for i, h := range in.GetDevices() {
		st := HealthStatus(h.GetStatus())
		if st < HealthUnknown || st > Unhealthy {
			st = HealthUnknown
		}
		out[i] = DeviceHealth{Pool: h.GetPool(), Device: h.GetDevice(), Status: st, Message: h.GetMessage()}
	}
	return out
}
