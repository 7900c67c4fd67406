package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"time"

	"github.com/go-logr/logr"

	"github.com/dranode/dranode/checkpoint/kubeletcompat"
	"github.com/dranode/dranode/claimcache"
)

// logDamage says what Open did with a damaged claim record, one line for
// the damage and one per claim whose last state is not known, so that an
// operator can follow each claim (dranodectl checkpoint inspect shows the
// same from the files).
func (a *Agent) logDamage() {
	if d := a.record.Report().Damage; d != nil {
		var aside []string
		for _, c := range d.Aside {
			aside = append(aside, c.Path)
		}
		a.log.Error(d.Cause, "Claim record was damaged: what came before the damage is restored, the rest is copied aside, and the claims it may have changed are uncertain",
			"keptRecords", d.KeptRecords, "aside", aside, "unreadableBytes", d.UnreadableBytes, "lost", d.Lost,
			"changesUnknown", d.Unknown, "claimsNamedAfterDamage", len(d.Uncertain))
		for _, u := range d.Uncertain {
			if !u.Recorded {
				a.log.Error(nil, "Claim named after the damage could not be recorded; only the kubelet's checkpoint can bring it back",
					"claimUID", u.Claim.UID, "claim", u.Claim.Namespace+"/"+u.Claim.Name, "lastSeen", u.LastSeen, "conflict", u.Conflict)
			}
		}
	}
	for _, e := range a.record.Report().Uncertain {
		a.log.Info("Uncertain claim: its last state is unknown, reconciling it against the kubelet and the claim source",
			"claimUID", e.Claim.UID, "claim", e.Claim.Namespace+"/"+e.Claim.Name, "reason", e.Uncertain)
	}
}

// uncertainClaims counts the record's uncertain entries.
func (a *Agent) uncertainClaims() int {
	n := 0
	for _, e := range a.record.Cache().List() {
		if e.Uncertain != "" {
			n++
		}
	}
	return n
}

// reconcileLookupTimeout bounds one claim lookup while reconciling.
const reconcileLookupTimeout = 10 * time.Second

// reconcileUncertain settles what it can of the uncertain entries a
// damaged record left (claimcache.Cache.Reconcile): claims the kubelet's
// checkpoint lists for this agent's drivers are kept (and recorded, with
// their devices, when the record lost them) for the kubelet's next call to
// settle; those the claim source says are gone are unprepared through the
// plugins; the others wait for the kubelet or the next start. It runs
// before the kubelet is served, so no kubelet call races it, and does
// nothing when the record holds no uncertain entry and lost nothing.
func (a *Agent) reconcileUncertain(ctx context.Context) {
	lostUnknown := a.record.Report().Damage != nil && a.record.Report().Damage.Unknown
	if !lostUnknown && a.uncertainClaims() == 0 {
		return
	}
	path := a.cfg.Kubelet.DRAManagerState
	kubelet, err := a.kubeletClaims(path)
	if err != nil {
		// Without the kubelet's list, a claim in use cannot be told from
		// one that is not: keep every uncertain entry (the kubelet's
		// calls settle them) rather than unprepare a device in use.
		a.log.Error(err, "Reading the kubelet's DRA checkpoint (kubelet.draManagerState); uncertain claims are kept until the kubelet or the next start settles them", "path", path)
		return
	}
	res := a.record.Cache().Reconcile(claimcache.Reconciler{
		Kubelet: kubelet,
		Exists: func(ref claimcache.ClaimRef) (bool, error) {
			// Bounded: the kubelet is served only after this, and an API
			// server that does not answer must not keep it waiting; the
			// claim then stays uncertain.
			ctx, cancel := context.WithTimeout(ctx, reconcileLookupTimeout)
			defer cancel()
			c, err := a.claims.GetClaim(ctx, ref.Namespace, ref.Name)
			switch {
			case errors.Is(err, ErrClaimNotFound):
				return false, nil
			case err != nil:
				return false, err
			}
			return string(c.UID) == ref.UID, nil
		},
		Unprepare: func(e claimcache.Entry) error {
			log := a.log.WithValues("claimUID", e.Claim.UID, "claim", e.Claim.Namespace+"/"+e.Claim.Name)
			_, err := a.unprepareDrivers(logr.NewContext(ctx, log), e)
			return err
		},
	})
	for _, l := range []struct {
		msg     string
		entries []claimcache.Entry
	}{
		{"Uncertain claim recorded from the kubelet's checkpoint: the kubelet's next call settles it", res.Recorded},
		{"Uncertain claim kept: the kubelet lists it as prepared, its next call settles it", res.Kept},
		{"Uncertain claim unprepared: its ResourceClaim is gone", res.Unprepared},
		{"Uncertain claim waiting: the kubelet does not list it but its ResourceClaim exists; a Prepare or the next start settles it", res.Waiting},
	} {
		for _, e := range l.entries {
			a.log.Info(l.msg, "claimUID", e.Claim.UID, "claim", e.Claim.Namespace+"/"+e.Claim.Name, "drivers", driverNames(e))
		}
	}
	for _, err := range res.Errors {
		a.log.Error(err, "Reconciling an uncertain claim; it stays uncertain (or UnprepareStarted, finished at the next start or by the kubelet)")
	}
}

// kubeletClaims reads the kubelet's DRA checkpoint at path and returns the
// claims it lists with the devices of this agent's drivers. A missing file
// lists nothing (no kubelet, or one that prepared nothing yet).
func (a *Agent) kubeletClaims(path string) ([]claimcache.KubeletClaim, error) {
	state, err := kubeletcompat.ReadDRAManagerState(path)
	if errors.Is(err, fs.ErrNotExist) {
		a.log.Info("No kubelet DRA checkpoint: no claim is listed as prepared by the kubelet", "path", path)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ours := map[string]bool{}
	for _, n := range a.Drivers() {
		ours[n] = true
	}
	var out []claimcache.KubeletClaim
	for _, c := range state.Claims {
		k := claimcache.KubeletClaim{Claim: claimcache.ClaimRef{Namespace: c.Namespace, Name: c.Name, UID: c.UID}}
		for driver, ds := range c.Drivers {
			if !ours[driver] {
				continue
			}
			if k.Drivers == nil {
				k.Drivers = map[string][]claimcache.Device{}
			}
			devs := []claimcache.Device{}
			for _, d := range ds.Devices {
				devs = append(devs, claimcache.Device{Pool: d.PoolName, Device: d.DeviceName, Requests: d.RequestNames,
					ShareID: d.ShareID, CDIDeviceIDs: d.CDIDeviceIDs})
			}
			k.Drivers[driver] = devs
		}
		if k.Drivers == nil {
			continue // only other drivers prepared it
		}
		if c.UID == "" || c.Namespace == "" || c.Name == "" {
			return nil, fmt.Errorf("%s lists a claim without namespace, name or UID (%q/%q, %q)", path, c.Namespace, c.Name, c.UID)
		}
		out = append(out, k)
	}
	return out, nil
}

func driverNames(e claimcache.Entry) []string { return slices.Sorted(maps.Keys(e.Drivers)) }
