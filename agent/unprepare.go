package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dranode/dranode/cdi"
	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/sliceclient/claimstatus"
)

// Unprepare undoes a claim from the record alone (no API server needed):
// record UnprepareStarted, hand each plugin what it prepared, remove the CDI
// specs, drop the record. An unknown UID succeeds. A claim left in
// PrepareStarted is rolled back by asking every plugin of this agent. A
// Prepared claim whose drivers all declare a stateless Prepare skips
// UnprepareStarted: a crash before the record is dropped leaves it
// Prepared, for the next Unprepare to find whole.
func (a *Agent) Unprepare(ctx context.Context, uid string) error {
	if uid == "" {
		return fmt.Errorf("%w: empty claim UID", ErrClaimNotUsable)
	}
	unlock, err := a.record.Cache().LockClaim(uid)
	if err != nil {
		return err
	}
	defer unlock()
	return a.unprepareLocked(ctx, uid)
}

func (a *Agent) unprepareLocked(ctx context.Context, uid string) error {
	e, err := a.record.Cache().Get(uid)
	if errors.Is(err, claimcache.ErrNotFound) {
		logr.FromContextOrDiscard(ctx).V(2).Info("Claim not recorded, nothing to unprepare", "claimUID", uid)
		return nil
	}
	once := err == nil && a.removeOnce(e)
	if !once {
		if e, err = a.record.Cache().StartUnprepare(uid); err != nil {
			return fmt.Errorf("recording claim %s as being unprepared: %w", uid, err)
		}
	}
	names, err := a.unprepareDrivers(ctx, e)
	if err != nil {
		return err
	}
	if once {
		err = a.record.Cache().RemovePrepared(uid)
	} else {
		err = a.record.Cache().Remove(uid)
	}
	if err != nil {
		return fmt.Errorf("dropping claim %s from the record: %w", uid, err)
	}
	if a.status != nil {
		for _, name := range names {
			a.status.clear(name, claimstatus.Claim{Namespace: e.Claim.Namespace, Name: e.Claim.Name, UID: types.UID(uid)})
		}
	}
	logr.FromContextOrDiscard(ctx).Info("Claim unprepared", "claimUID", uid, "drivers", names)
	return nil
}

// removeOnce reports whether a recorded claim may be dropped from the
// record in one commit, without UnprepareStarted first: when it is
// Prepared (not being prepared or unprepared, not uncertain) and every
// driver it holds devices of declares a stateless Prepare.
func (a *Agent) removeOnce(e claimcache.Entry) bool {
	if e.State != claimcache.Prepared || len(e.Drivers) == 0 {
		return false
	}
	for name := range e.Drivers {
		if d := a.driver(name); d == nil || !d.statelessPrepare {
			return false
		}
	}
	return true
}

// unprepareDrivers has the drivers of a claim in UnprepareStarted (or
// Prepared, for removeOnce) unprepare its devices and removes its CDI
// specs; the caller holds the claim's lock and removes the entry
// afterwards. It returns the drivers
// called.
func (a *Agent) unprepareDrivers(ctx context.Context, e claimcache.Entry) ([]string, error) {
	uid := e.Claim.UID
	drivers := e.Drivers
	if len(drivers) == 0 {
		// Interrupted before anything was recorded: any plugin may have
		// prepared part of it.
		drivers = map[string][]claimcache.Device{}
		for _, n := range a.Drivers() {
			drivers[n] = nil
		}
	}
	names := make([]string, 0, len(drivers))
	for n := range drivers {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		d := a.driver(name)
		if d == nil {
			return nil, fmt.Errorf("claim %s: driver %s prepared it but is not configured any more; the record is kept", e.Claim, name)
		}
		pc := pluginmgr.PreparedClaim{UID: types.UID(uid), Namespace: e.Claim.Namespace, Name: e.Claim.Name}
		for _, dev := range drivers[name] {
			pc.Devices = append(pc.Devices, pluginmgr.PreparedDevice{Pool: dev.Pool, Device: dev.Device, Requests: dev.Requests,
				ShareID: dev.ShareID, AdminAccess: dev.AdminAccess})
		}
		res, err := d.plugin.Unprepare(ctx, []pluginmgr.PreparedClaim{pc})
		if err != nil {
			return nil, fmt.Errorf("driver %s: unprepare: %w", name, err)
		}
		if len(res) == 1 && res[0].Err != nil {
			return nil, fmt.Errorf("driver %s: %w", name, res[0].Err)
		}
		if err := a.specs.Remove(name, cdi.ClaimClass, uid); err != nil {
			return nil, fmt.Errorf("driver %s: %w", name, err)
		}
		if err := removeMetadata(a.cfg.Kubelet.PluginsDir, name, uid); err != nil {
			return nil, fmt.Errorf("driver %s: %w", name, err)
		}
	}
	return names, nil
}

// finishInterrupted completes unprepares a crash interrupted. Claims left in
// PrepareStarted wait for the kubelet's next call (Prepare finishes them,
// Unprepare rolls them back).
func (a *Agent) finishInterrupted(ctx context.Context) {
	for _, e := range a.record.Cache().List() {
		if e.State != claimcache.UnprepareStarted {
			continue
		}
		log := a.log.WithValues("claimUID", e.Claim.UID, "claim", e.Claim.Namespace+"/"+e.Claim.Name)
		if err := a.Unprepare(logr.NewContext(ctx, log), e.Claim.UID); err != nil {
			log.Error(err, "Finishing an interrupted unprepare; the kubelet's next call retries")
		}
	}
}
