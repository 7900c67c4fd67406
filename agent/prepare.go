package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/dranode/dranode/cdi"
	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/sliceclient/claimstatus"
)

// ErrClaimNotUsable is matched by errors for a claim that cannot be prepared
// on this node as it is: another UID, no allocation, another node, no
// devices of the driver.
var ErrClaimNotUsable = errors.New("ResourceClaim cannot be prepared on this node")

// ClaimRequest names a claim as the kubelet does.
type ClaimRequest struct {
	Namespace, Name, UID string
}

// Prepare prepares one claim for the named driver as the DRA service does:
// from the record when it is already prepared in this boot (recreating a
// missing CDI spec), otherwise by fetching the claim, recording
// PrepareStarted, calling every plugin of this agent with devices in the
// claim, recording Prepared and writing one CDI spec per driver. A device
// another claim holds refuses the claim before any of that
// (holdDevices): the error is a *claimcache.DeviceInUseError. It returns
// the driver's devices as recorded, which is what the kubelet gets back.
func (a *Agent) Prepare(ctx context.Context, driverName string, req ClaimRequest) ([]claimcache.Device, error) {
	if req.UID == "" || req.Namespace == "" || req.Name == "" {
		return nil, fmt.Errorf("%w: claim %s/%s with UID %q: namespace, name and UID are required", ErrClaimNotUsable, req.Namespace, req.Name, req.UID)
	}
	ctx, obs := a.metrics.startPrepareObserver(ctx, driverName)
	defer obs.done()
	unlock, err := a.record.Cache().LockClaim(req.UID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	obs.phase(phaseLockWait, obs.start)
	return a.prepareLocked(ctx, driverName, req)
}

// prepareLocked is Prepare under the claim's lock: the record, the claim,
// the devices held (no other claim has them), PrepareStarted, the plugins,
// Prepared, the CDI specs.
//
// PrepareStarted is recorded after the claim is read, not while: an earlier
// version overlapped that commit with the read (a goroutine, and a
// compensating removal when the claim turned out unusable). Side by side
// at commit 2084d9b, 6 interleaved runs each on a loaded 2-core machine,
// BenchmarkPrepareUnprepareAPILatency1 (a 1.3 ms claim read) took 16.1 ms
// ±45% with the overlap and 18.0 ms ±113% without (p=0.31), and
// BenchmarkPrepareUnprepare1 11.2 ms ±16% and 12.7 ms ±145% (p=0.13): no
// measurable gain, for a second goroutine and a cleanup path.
//
// A new claim whose drivers all declare a stateless Prepare is not recorded
// as PrepareStarted at all (recordOnce): a crash before Prepared is
// recorded leaves nothing on the node for an Unprepare to undo.
//
// The specs are written after Prepared is recorded: the sweep removes the
// specs of claims that are not recorded, and a crash between the two
// leaves a prepared claim without its spec, which the kubelet's next
// Prepare recreates (preparedBefore).
func (a *Agent) prepareLocked(ctx context.Context, driverName string, req ClaimRequest) ([]claimcache.Device, error) {
	known, err := a.record.Cache().Get(req.UID)
	if err == nil && known.PreparedInCurrentBoot() {
		return a.preparedBefore(ctx, driverName, req, known)
	}
	claim, err := a.getClaim(ctx, req.Namespace, req.Name)
	if err != nil {
		return nil, err
	}
	hosted, err := a.check(claim, req, driverName)
	if err != nil {
		return nil, err
	}
	ref := claimcache.ClaimRef{Namespace: req.Namespace, Name: req.Name, UID: req.UID}
	hold, err := a.holdDevices(ref, claim, hosted)
	if err != nil {
		return nil, err
	}
	defer hold.Release() // once recorded, the record holds the devices
	once := a.recordOnce(ref, hosted)
	if !once {
		if err := a.startPrepare(ctx, ref); err != nil {
			return nil, err
		}
	}
	recorded := map[string][]claimcache.Device{}
	statuses := map[string][]resourcev1.AllocatedDeviceStatus{}
	specs := map[string]*cdi.Spec{}
	for _, name := range hosted {
		devs, spec, st, err := a.prepareDriver(ctx, claim, name)
		if err != nil {
			// The claim stays PrepareStarted (or unrecorded): the next
			// Prepare finishes it, an Unprepare rolls it back.
			return nil, err
		}
		recorded[name], specs[name], statuses[name] = devs, spec, st
	}
	e, err := a.finishPrepare(ctx, ref, recorded, once)
	if err != nil {
		return nil, err
	}
	if err := a.writeSpecs(ctx, req.UID, specs); err != nil {
		return nil, err
	}
	a.applyStatuses(claim, statuses)
	logr.FromContextOrDiscard(ctx).Info("Claim prepared", "drivers", hosted)
	return e.Drivers[driverName], nil
}

// recordOnce reports whether the claim may be recorded once, as Prepared
// after its plugins answered, instead of PrepareStarted before them too:
// when every driver with devices in it declares a stateless Prepare
// (pluginmgr.Info.StatelessPrepare) and the record knows neither its UID
// nor its name (a recorded one may need its old claim or its own
// interrupted unprepare finished first, which startPrepare does).
//
// One commit instead of two per prepare (and per unprepare, removeOnce):
// in compat/drabench, 10 rounds each side by side, the agent's share above
// the kubelet's floor fell from 6.2 to 5.4 ms one pod at a time (prepare
// p50) and from 2.3 to 1.7 ms (unprepare p50); compat/drabench/BENCHMARKS.md.
func (a *Agent) recordOnce(ref claimcache.ClaimRef, hosted []string) bool {
	for _, name := range hosted {
		if !a.driver(name).statelessPrepare {
			return false
		}
	}
	if _, err := a.record.Cache().Get(ref.UID); !errors.Is(err, claimcache.ErrNotFound) {
		return false
	}
	_, err := a.record.Cache().LookupName(ref.Namespace, ref.Name)
	return errors.Is(err, claimcache.ErrNotFound)
}

// preparedBefore answers for a claim prepared in this boot from the record,
// after recreating its CDI specs if they went missing.
func (a *Agent) preparedBefore(ctx context.Context, driverName string, req ClaimRequest, e claimcache.Entry) ([]claimcache.Device, error) {
	if e.Claim.Namespace != req.Namespace || e.Claim.Name != req.Name {
		return nil, fmt.Errorf("%w: UID %s is recorded as %s/%s", ErrClaimNotUsable, req.UID, e.Claim.Namespace, e.Claim.Name)
	}
	if err := a.ensureSpecs(ctx, e); err != nil {
		return nil, err
	}
	logr.FromContextOrDiscard(ctx).V(2).Info("Claim already prepared in this boot, answered from the record")
	return e.Drivers[driverName], nil
}

// getClaim reads a claim from the claim source.
func (a *Agent) getClaim(ctx context.Context, namespace, name string) (_ *resourcev1.ResourceClaim, err error) {
	defer observePhase(ctx, phaseClaimFetch, time.Now(), &err)
	return a.claims.GetClaim(ctx, namespace, name)
}

// finishPrepare records the claim as prepared with the devices of each
// driver: from PrepareStarted, or at once for a claim recordOnce allowed.
func (a *Agent) finishPrepare(ctx context.Context, ref claimcache.ClaimRef, recorded map[string][]claimcache.Device, once bool) (e claimcache.Entry, err error) {
	defer observePhase(ctx, phaseRecordPrepared, time.Now(), &err)
	if once {
		e, err = a.record.Cache().RecordPrepared(ref, recorded)
	} else {
		e, err = a.record.Cache().FinishPrepare(ref.UID, recorded)
	}
	if err != nil {
		return e, fmt.Errorf("recording claim %s as prepared: %w", ref, err)
	}
	return e, nil
}

// applyStatuses queues the device status the plugins returned for the
// claim (status.go).
func (a *Agent) applyStatuses(claim *resourcev1.ResourceClaim, statuses map[string][]resourcev1.AllocatedDeviceStatus) {
	if a.status == nil {
		return
	}
	for name, st := range statuses {
		if len(st) > 0 {
			a.status.apply(name, claimstatus.Claim{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}, st)
		}
	}
}

// startPrepare records PrepareStarted, first unpreparing what stands in the
// way: the old claim of the same name (its pod was force deleted and the
// claim recreated), or this claim's own interrupted unprepare.
func (a *Agent) startPrepare(ctx context.Context, ref claimcache.ClaimRef) (err error) {
	defer observePhase(ctx, phaseRecordStarted, time.Now(), &err)
	for attempt := 0; ; attempt++ {
		_, err := a.record.Cache().StartPrepare(ref, "")
		if err == nil {
			return nil
		}
		if attempt > 0 {
			return fmt.Errorf("recording claim %s as being prepared: %w", ref, err)
		}
		var mismatch *claimcache.UIDMismatchError
		var trans *claimcache.TransitionError
		switch {
		case errors.As(err, &mismatch):
			logr.FromContextOrDiscard(ctx).Info("Unpreparing the old claim of the same name first", "oldUID", mismatch.RecordedUID)
			if err := a.Unprepare(ctx, mismatch.RecordedUID); err != nil {
				return fmt.Errorf("claim %s: unpreparing the earlier claim with UID %s: %w", ref, mismatch.RecordedUID, err)
			}
		case errors.As(err, &trans) && trans.From == claimcache.UnprepareStarted:
			if err := a.unprepareLocked(ctx, ref.UID); err != nil {
				return fmt.Errorf("claim %s: finishing its interrupted unprepare: %w", ref, err)
			}
		default:
			return fmt.Errorf("recording claim %s as being prepared: %w", ref, err)
		}
	}
}

// check verifies that the claim fetched is the one asked for, allocated, for
// this node and for driverName, and returns the drivers of this agent that
// have devices in it, sorted.
func (a *Agent) check(claim *resourcev1.ResourceClaim, req ClaimRequest, driverName string) ([]string, error) {
	id := req.Namespace + "/" + req.Name
	if string(claim.UID) != req.UID {
		return nil, fmt.Errorf("%w: %s has UID %s, the kubelet asked for %s (deleted and recreated?)", ErrClaimNotUsable, id, claim.UID, req.UID)
	}
	alloc := claim.Status.Allocation
	if alloc == nil {
		return nil, fmt.Errorf("%w: %s is not allocated", ErrClaimNotUsable, id)
	}
	if !selectsNode(alloc, a.cfg.NodeName) {
		return nil, fmt.Errorf("%w: %s is allocated to another node, not %s", ErrClaimNotUsable, id, a.cfg.NodeName)
	}
	var hosted []string
	for _, r := range alloc.Devices.Results {
		if a.driver(r.Driver) != nil && !slices.Contains(hosted, r.Driver) {
			hosted = append(hosted, r.Driver)
		}
	}
	slices.Sort(hosted)
	if !slices.Contains(hosted, driverName) {
		return nil, fmt.Errorf("%w: %s has no devices of driver %s", ErrClaimNotUsable, id, driverName)
	}
	return hosted, nil
}

// selectsNode checks the allocation's node selector as far as it names
// nodes (matchFields on metadata.name, how the scheduler pins node-local
// devices). Label expressions need the Node object and are the scheduler's
// business; a selector made only of them is accepted.
func selectsNode(alloc *resourcev1.AllocationResult, node string) bool {
	if alloc.NodeSelector == nil {
		return true
	}
	named := false
	for _, term := range alloc.NodeSelector.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key != "metadata.name" {
				continue
			}
			named = true
			if f.Operator == "In" && slices.Contains(f.Values, node) {
				return true
			}
		}
	}
	return !named
}

// prepareDriver calls one plugin for the claim and builds its CDI spec. It
// returns the devices to record, the spec to write and the status the
// plugin reported for them, if any.
func (a *Agent) prepareDriver(ctx context.Context, claim *resourcev1.ResourceClaim, driverName string) ([]claimcache.Device, *cdi.Spec, []resourcev1.AllocatedDeviceStatus, error) {
	d := a.driver(driverName)
	pc := pluginmgr.Claim{UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name}
	alloc := claim.Status.Allocation
	for _, r := range alloc.Devices.Results {
		if r.Driver == driverName {
			pc.Results = append(pc.Results, r)
		}
	}
	// Class configurations first, then the claim's: later ones win.
	for _, src := range []resourcev1.AllocationConfigSource{resourcev1.AllocationConfigSourceClass, resourcev1.AllocationConfigSourceClaim} {
		for _, c := range alloc.Devices.Config {
			if c.Source == src && c.Opaque != nil && c.Opaque.Driver == driverName {
				pc.Configs = append(pc.Configs, c)
			}
		}
	}
	results, err := d.prepare(ctx, pc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("driver %s: prepare: %w", driverName, err)
	}
	if len(results) != 1 {
		return nil, nil, nil, fmt.Errorf("driver %s: prepare returned %d results for 1 claim", driverName, len(results))
	}
	if results[0].Err != nil {
		return nil, nil, nil, fmt.Errorf("driver %s: %w", driverName, results[0].Err)
	}
	spec, devices, err := buildSpec(driverName, string(claim.UID), results[0].Devices, pc.Results)
	if err != nil {
		return nil, nil, nil, err
	}
	if a.cfg.CDI.DeviceMetadata {
		inv, _ := d.plugin.Inventory()
		if err := addMetadata(a.cfg.Kubelet.PluginsDir, driverName, claim, inv, pc.Results, results[0].Devices, spec, devices); err != nil {
			return nil, nil, nil, fmt.Errorf("driver %s: %w", driverName, err)
		}
	}
	return devices, spec, deviceStatuses(driverName, results[0].Devices, devices), nil
}

// writeSpecs writes a claim's CDI spec of each driver.
//
// The specs are written without fsync (SpecDir.NoSync): they are derived
// from the durable record, not part of it. Temp file and rename still make
// them appear whole to the runtime, and an agent crash loses nothing (the
// kernel holds the file). Only a machine crash can lose or empty one, and
// then the boot ID changes: every recorded claim counts as not prepared,
// the next Prepare runs the plugins again and rewrites the specs, an
// Unprepare removes them, and Start sweeps specs of unrecorded claims. Two
// fsyncs per spec (file and directory) bought nothing but latency, and
// they contend with the record's and the kubelet's own checkpoint fsyncs
// on the same disk.
func (a *Agent) writeSpecs(ctx context.Context, claimUID string, specs map[string]*cdi.Spec) (err error) {
	defer observePhase(ctx, phaseCDIWrite, time.Now(), &err)
	for name, spec := range specs {
		if _, err := a.specs.Write(spec, claimUID); err != nil {
			return fmt.Errorf("driver %s: %w", name, err)
		}
	}
	return nil
}

// ensureSpecs recreates the CDI specs of a prepared claim that went missing
// (someone cleaned /var/run/cdi): the plugins' Prepare is idempotent, so
// asking again gives the same edits, and the device names are derived from
// the claim, so the recorded CDI IDs stay right.
func (a *Agent) ensureSpecs(ctx context.Context, e claimcache.Entry) error {
	var claim *resourcev1.ResourceClaim
	for driverName := range e.Drivers {
		path, exists, err := a.specs.Lookup(driverName, cdi.ClaimClass, e.Claim.UID)
		if err != nil {
			return fmt.Errorf("claim %s: driver %s: %w", e.Claim, driverName, err)
		}
		if exists {
			continue
		}
		if a.driver(driverName) == nil {
			return fmt.Errorf("claim %s: driver %s is recorded but not configured", e.Claim, driverName)
		}
		if claim == nil {
			c, err := a.getClaim(ctx, e.Claim.Namespace, e.Claim.Name)
			if err != nil {
				return fmt.Errorf("claim %s: recreating its missing CDI spec: %w", e.Claim, err)
			}
			if string(c.UID) != e.Claim.UID || c.Status.Allocation == nil {
				return fmt.Errorf("%w: claim %s: recreating its missing CDI spec: the API has UID %s, allocated %v", ErrClaimNotUsable, e.Claim, c.UID, c.Status.Allocation != nil)
			}
			claim = c
		}
		logr.FromContextOrDiscard(ctx).Info("Recreating missing CDI spec", "path", path)
		_, spec, _, err := a.prepareDriver(ctx, claim, driverName)
		if err != nil {
			return err
		}
		if err := a.writeSpecs(ctx, e.Claim.UID, map[string]*cdi.Spec{driverName: spec}); err != nil {
			return err
		}
	}
	return nil
}
