package conformance

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
)

// Options tune Run. The zero value works.
type Options struct {
	// Timeout bounds each call and the wait for the first inventory;
	// default 30s.
	Timeout time.Duration
}

// Run checks a launched plugin against the contract and reports every
// violation through t, prefixed with "conformance:". It checks that Info is
// valid, that the first inventory passes inventory.Validate (what the API
// server accepts in ResourceSlices), that Prepare of an allocated device
// succeeds, is idempotent and returns usable container edits, that an
// admin-access claim of a device another claim holds is prepared and its
// Unprepare leaves the owner's preparation alone, that shares of a device
// published with allowMultipleAllocations (if the inventory has one) are
// each answered with their own share ID, that Unprepare is idempotent, and
// that Unprepare of an unknown claim succeeds.
func Run(t testing.TB, p *pluginmgr.Plugin, opts Options) {
	t.Helper()
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	call := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), opts.Timeout)
	}

	info := p.Info()
	reportInvalid(t, "Info", inventory.ValidateDriverName(info.DriverName))
	if info.DriverVersion == "" {
		t.Errorf("conformance: Info: driver version is empty")
	}
	for _, k := range info.OpaqueConfigKinds {
		if err := validateKind(k); err != nil {
			t.Errorf("conformance: Info: opaque config kind %q: %v", k, err)
		}
	}

	ctx, cancel := call()
	inv, _, err := p.WaitInventory(ctx, 0)
	cancel()
	if err != nil {
		t.Fatalf("conformance: no inventory: %v", err)
	}
	reportInvalid(t, "inventory", inventory.Validate(inv))
	pool, device, ok := firstDevice(inv)
	if !ok {
		t.Fatalf("conformance: the inventory has no device to prepare")
	}

	claim := pluginmgr.Claim{
		UID: newUID(), Namespace: "conformance", Name: "claim-0",
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: "req-0", Driver: info.DriverName, Pool: pool, Device: device}},
	}
	first := prepare(t, call, p, claim, "first Prepare")
	second := prepare(t, call, p, claim, "repeated Prepare")
	// A status condition's transition time may be the time of the call.
	if first != nil && second != nil && !reflect.DeepEqual(withoutTransitionTimes(first), withoutTransitionTimes(second)) {
		t.Errorf("conformance: Prepare is not idempotent: first %+v, then %+v", first, second)
	}
	for _, d := range first {
		if d.Pool != pool || d.Device != device {
			t.Errorf("conformance: Prepare returned device %s/%s, which was not allocated (%s/%s was)", d.Pool, d.Device, pool, device)
		}
		for _, e := range validateEdits(d.Edits) {
			t.Errorf("conformance: Prepare: device %s: %s", d.Device, e)
		}
		for _, e := range validateStatus(d.Status) {
			t.Errorf("conformance: Prepare: device %s: status: %s", d.Device, e)
		}
	}
	if len(first) == 0 {
		t.Errorf("conformance: Prepare returned no device for claim %s with one allocated device", claim.UID)
	}

	checkAdminAccess(t, call, p, claim, first)
	if pool, dev, ok := sharedDevice(inv); ok {
		checkShares(t, call, p, info.DriverName, pool, dev)
	}

	prepared := pluginmgr.PreparedClaim{UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name, Devices: first}
	unprepare(t, call, p, prepared, "Unprepare")
	unprepare(t, call, p, prepared, "repeated Unprepare")
	unknown := pluginmgr.PreparedClaim{UID: newUID(), Namespace: "conformance", Name: "never-prepared", Devices: first}
	unprepare(t, call, p, unknown, "Unprepare of a claim never prepared")
	unprepare(t, call, p, pluginmgr.PreparedClaim{UID: newUID(), Namespace: "conformance", Name: "no-devices"}, "Unprepare of an unknown claim without devices")
}

// checkAdminAccess prepares an admin-access claim on the device another
// claim holds (prepared as held): Kubernetes allocates such claims next to
// the device's owner, and the driver must grant monitoring access without
// taking the device over. Unpreparing it must leave the owner's
// preparation as it was.
func checkAdminAccess(t testing.TB, call func() (context.Context, context.CancelFunc), p *pluginmgr.Plugin, owner pluginmgr.Claim, held []pluginmgr.PreparedDevice) {
	t.Helper()
	driver, pool, device := owner.Results[0].Driver, owner.Results[0].Pool, owner.Results[0].Device
	admin := pluginmgr.Claim{
		UID: newUID(), Namespace: "conformance", Name: "admin-access",
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: "monitor", Driver: driver, Pool: pool, Device: device, AdminAccess: ptr.To(true)}},
	}
	devs := prepare(t, call, p, admin, "Prepare with admin access of a device another claim holds")
	if devs == nil {
		return
	}
	if len(devs) != 1 || devs[0].Pool != pool || devs[0].Device != device {
		t.Errorf("conformance: Prepare with admin access of %s/%s returned %d devices (%+v), want that one", pool, device, len(devs), devs)
	}
	for _, d := range devs {
		for _, e := range validateEdits(d.Edits) {
			t.Errorf("conformance: Prepare with admin access: device %s: %s", d.Device, e)
		}
	}
	for i := range devs {
		devs[i].AdminAccess = true // as a host hands it back
	}
	unprepare(t, call, p, pluginmgr.PreparedClaim{UID: admin.UID, Namespace: admin.Namespace, Name: admin.Name, Devices: devs}, "Unprepare of an admin-access claim")
	if held == nil {
		return
	}
	if again := prepare(t, call, p, owner, "Prepare of the owner after an admin-access claim"); again != nil &&
		!reflect.DeepEqual(withoutTransitionTimes(again), withoutTransitionTimes(held)) {
		t.Errorf("conformance: the owner's Prepare answered %+v after an admin-access claim of its device came and went, %+v before", again, held)
	}
}

// checkShares prepares one claim with two shares of a device published
// with allowMultipleAllocations (consumable capacity) and a second claim
// with a third share, side by side: each share must come back as its own
// entry carrying its share ID, which is what gives it its own CDI device.
func checkShares(t testing.TB, call func() (context.Context, context.CancelFunc), p *pluginmgr.Plugin, driver, pool, device string) {
	t.Helper()
	shares := []types.UID{newUID(), newUID(), newUID()}
	result := func(request string, share types.UID) resourcev1.DeviceRequestAllocationResult {
		return resourcev1.DeviceRequestAllocationResult{Request: request, Driver: driver, Pool: pool, Device: device, ShareID: ptr.To(share)}
	}
	claims := []pluginmgr.Claim{
		{UID: newUID(), Namespace: "conformance", Name: "two-shares", Results: []resourcev1.DeviceRequestAllocationResult{result("share-0", shares[0]), result("share-1", shares[1])}},
		{UID: newUID(), Namespace: "conformance", Name: "third-share", Results: []resourcev1.DeviceRequestAllocationResult{result("share-2", shares[2])}},
	}
	for _, c := range claims {
		devs := prepare(t, call, p, c, "Prepare of shares of "+pool+"/"+device)
		if devs == nil {
			continue
		}
		want := map[string]bool{}
		for _, r := range c.Results {
			want[string(*r.ShareID)] = true
		}
		got := map[string]int{}
		for _, d := range devs {
			got[d.ShareID]++
			if d.Pool != pool || d.Device != device {
				t.Errorf("conformance: Prepare of shares of %s/%s returned device %s/%s", pool, device, d.Pool, d.Device)
			}
		}
		for id := range want {
			if got[id] != 1 {
				t.Errorf("conformance: Prepare of claim %s with %d shares of %s/%s: share %s answered %d times, want once (PreparedDevice.ShareID; each share gets its own CDI device)",
					c.Name, len(c.Results), pool, device, id, got[id])
			}
		}
		for id, n := range got {
			if !want[id] {
				t.Errorf("conformance: Prepare of claim %s returned %d entries with share ID %q, which was not allocated", c.Name, n, id)
			}
		}
		defer unprepare(t, call, p, pluginmgr.PreparedClaim{UID: c.UID, Namespace: c.Namespace, Name: c.Name, Devices: devs}, "Unprepare of a claim with shares")
	}
}

func prepare(t testing.TB, call func() (context.Context, context.CancelFunc), p *pluginmgr.Plugin, claim pluginmgr.Claim, what string) []pluginmgr.PreparedDevice {
	t.Helper()
	ctx, cancel := call()
	defer cancel()
	results, err := p.Prepare(ctx, []pluginmgr.Claim{claim})
	if err != nil {
		t.Errorf("conformance: %s of claim %s failed: %v", what, claim.UID, err)
		return nil
	}
	if results[0].Err != nil {
		t.Errorf("conformance: %s of claim %s failed: %v", what, claim.UID, results[0].Err)
		return nil
	}
	return results[0].Devices
}

func unprepare(t testing.TB, call func() (context.Context, context.CancelFunc), p *pluginmgr.Plugin, claim pluginmgr.PreparedClaim, what string) {
	t.Helper()
	ctx, cancel := call()
	defer cancel()
	results, err := p.Unprepare(ctx, []pluginmgr.PreparedClaim{claim})
	if err != nil {
		t.Errorf("conformance: %s (claim %s) failed: %v", what, claim.UID, err)
		return
	}
	if results[0].Err != nil {
		t.Errorf("conformance: %s (claim %s) failed: %v", what, claim.UID, results[0].Err)
	}
}

// reportInvalid reports each problem of a validation error on its own, so
// that a vendor sees every bad field at once.
func reportInvalid(t testing.TB, what string, err error) {
	t.Helper()
	var ve *inventory.ValidationError
	if !errors.As(err, &ve) {
		if err != nil {
			t.Errorf("conformance: %s: %v", what, err)
		}
		return
	}
	for _, problem := range ve.Problems {
		t.Errorf("conformance: %s: %s", what, problem)
	}
}

// sharedDevice is the first device published with allowMultipleAllocations.
func sharedDevice(inv inventory.Inventory) (pool, device string, ok bool) {
	for _, p := range inv.Pools {
		for _, d := range p.Devices {
			if d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations {
				return p.Name, d.Name, true
			}
		}
	}
	return "", "", false
}

func firstDevice(inv inventory.Inventory) (pool, device string, ok bool) {
	for _, p := range inv.Pools {
		if len(p.Devices) > 0 {
			return p.Name, p.Devices[0].Name, true
		}
	}
	return "", "", false
}

// validateKind checks "group/version/Kind" (or "version/Kind" for the core
// group, which no driver should use but the form allows).
func validateKind(k string) error {
	parts := strings.Split(k, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return fmt.Errorf("want group/version/Kind")
	}
	for _, part := range parts {
		if part == "" {
			return fmt.Errorf("empty segment")
		}
	}
	return nil
}

func validateEdits(e pluginmgr.ContainerEdits) []string {
	var errs []string
	for _, env := range e.Env {
		if name, _, ok := strings.Cut(env, "="); !ok || name == "" {
			errs = append(errs, fmt.Sprintf("env entry %q is not NAME=VALUE", env))
		}
	}
	for _, n := range e.DeviceNodes {
		if !path.IsAbs(n.Path) {
			errs = append(errs, fmt.Sprintf("device node path %q is not absolute", n.Path))
		}
		if n.HostPath != "" && !path.IsAbs(n.HostPath) {
			errs = append(errs, fmt.Sprintf("device node host path %q is not absolute", n.HostPath))
		}
	}
	for _, m := range e.Mounts {
		if !path.IsAbs(m.ContainerPath) {
			errs = append(errs, fmt.Sprintf("mount container path %q is not absolute", m.ContainerPath))
		}
		if m.HostPath == "" {
			errs = append(errs, fmt.Sprintf("mount at %q has no host path", m.ContainerPath))
		}
	}
	for _, h := range e.Hooks {
		if h.HookName == "" || !path.IsAbs(h.Path) {
			errs = append(errs, fmt.Sprintf("hook %q needs a name and an absolute path (got %q)", h.HookName, h.Path))
		}
	}
	return errs
}

// withoutTransitionTimes is a copy of devs with the status conditions'
// lastTransitionTime cleared.
func withoutTransitionTimes(devs []pluginmgr.PreparedDevice) []pluginmgr.PreparedDevice {
	out := slices.Clone(devs)
	for i := range out {
		if out[i].Status == nil {
			continue
		}
		st := out[i].Status.DeepCopy()
		for j := range st.Conditions {
			st.Conditions[j].LastTransitionTime = metav1.Time{}
		}
		out[i].Status = st
	}
	return out
}

// validateStatus checks what the API server would refuse in a device
// status (resource.k8s.io/v1 validation of status.devices, v1.37): at most
// 8 conditions, each with type, status, reason and a transition time;
// data a JSON object of at most 10 KiB; an interface name of at most 256
// bytes, at most 16 IPs in CIDR notation, a hardware address of at most
// 128 bytes.
func validateStatus(st *resourcev1.AllocatedDeviceStatus) []string {
	if st == nil {
		return nil
	}
	var errs []string
	if len(st.Conditions) > 8 {
		errs = append(errs, fmt.Sprintf("%d conditions, at most 8", len(st.Conditions)))
	}
	for i, c := range st.Conditions {
		if c.Type == "" || c.Reason == "" || c.LastTransitionTime.IsZero() {
			errs = append(errs, fmt.Sprintf("condition %d: type, reason and lastTransitionTime are required", i))
		}
		if c.Status != metav1.ConditionTrue && c.Status != metav1.ConditionFalse && c.Status != metav1.ConditionUnknown {
			errs = append(errs, fmt.Sprintf("condition %d: status %q, want True, False or Unknown", i, c.Status))
		}
	}
	if st.Data != nil {
		var obj map[string]any
		if err := json.Unmarshal(st.Data.Raw, &obj); err != nil || obj == nil {
			errs = append(errs, fmt.Sprintf("data is not a JSON object: %q", st.Data.Raw))
		}
		if len(st.Data.Raw) > 10*1024 {
			errs = append(errs, fmt.Sprintf("data is %d bytes, at most 10 KiB", len(st.Data.Raw)))
		}
	}
	if n := st.NetworkData; n != nil {
		if len(n.InterfaceName) > 256 {
			errs = append(errs, "networkData.interfaceName is longer than 256 bytes")
		}
		if len(n.HardwareAddress) > 128 {
			errs = append(errs, "networkData.hardwareAddress is longer than 128 bytes")
		}
		if len(n.IPs) > 16 {
			errs = append(errs, fmt.Sprintf("networkData.ips has %d entries, at most 16", len(n.IPs)))
		}
		for _, ip := range n.IPs {
			if _, err := netip.ParsePrefix(ip); err != nil {
				errs = append(errs, fmt.Sprintf("networkData.ips: %q is not in CIDR notation", ip))
			}
		}
	}
	return errs
}

func newUID() types.UID {
	return types.UID(rand.Text())
}
