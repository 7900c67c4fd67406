package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dranode/dranode/checkpoint"
	"github.com/dranode/dranode/claimcache"
)

// recoveryReport is the claim record's recovery state: what the agent's
// recovery from damage left next to the record and in it, and, for a record
// damaged now, what that recovery will do at the agent's next start.
type recoveryReport struct {
	// Damage is set when the record is damaged now.
	Damage *damageReport `json:"damage,omitempty"`
	// Aside lists the copies of damaged data in the record's directory.
	Aside []asideFile `json:"aside,omitempty"`
	// Uncertain lists the entries whose last state damage hid (for a
	// record damaged now: those recovery will record), sorted by UID.
	Uncertain []uncertainEntry `json:"uncertain,omitempty"`
}

// damageReport is claimcache's recovery (Open with MoveCorruptAside) run on
// a copy of a damaged record: the record itself is not touched.
type damageReport struct {
	File            string           `json:"file"`
	Offset          int64            `json:"offset"`
	Reason          string           `json:"reason"`
	KeptRecords     int              `json:"keptRecords"`
	UnreadableBytes int64            `json:"unreadableBytes"`
	Lost            []string         `json:"lost,omitempty"`
	Unknown         bool             `json:"unknown"`
	Claims          []uncertainClaim `json:"claims,omitempty"`
}

// uncertainClaim is a claim a change after the damage names.
type uncertainClaim struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Recorded  bool   `json:"recorded"`
	LastSeen  string `json:"lastSeen,omitempty"`
	Conflict  string `json:"conflict,omitempty"`
}

type asideFile struct {
	Name  string    `json:"name"`
	From  string    `json:"from"`
	Time  time.Time `json:"time"`
	Bytes int64     `json:"bytes"`
}

type uncertainEntry struct {
	UID       string   `json:"uid"`
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Reason    string   `json:"reason"`
	Devices   []string `json:"devices,omitempty"` // driver pool/device
}

// claimRecordRecovery reports the recovery state of the journal in dir,
// which readJournalReport read into rep (readErr: what it found wrong), when
// it is a claim record. It never writes to dir.
func claimRecordRecovery(ctx context.Context, rep *checkpointReport, dir string, readErr error) (*recoveryReport, error) {
	if rep.Kind != claimcache.Kind {
		return nil, nil
	}
	out := &recoveryReport{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	for _, en := range entries {
		from, at, ok := checkpoint.ParseAsideName(en.Name())
		if !ok || !en.Type().IsRegular() {
			continue
		}
		info, err := en.Info()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, en.Name()), err)
		}
		out.Aside = append(out.Aside, asideFile{Name: en.Name(), From: from, Time: at, Bytes: info.Size()})
	}
	boot, err := claimcache.ReadBootID()
	if err != nil {
		boot = "" // staleness is not shown; uncertainty does not depend on it
	}
	var corrupt *checkpoint.CorruptError
	switch {
	case errors.As(readErr, &corrupt):
		if out.Damage, out.Uncertain, err = dryRunRecovery(ctx, dir, boot); err != nil {
			return out, err
		}
	case readErr == nil && rep.Journal != nil:
		for key, value := range rep.Journal.State {
			e, err := claimcache.DecodeEntry(key, rep.Journal.ValueVersion(key), value, boot)
			if err != nil {
				return out, fmt.Errorf("%s: %w", dir, err)
			}
			if e.Uncertain != "" {
				out.Uncertain = append(out.Uncertain, uncertainOf(e))
			}
		}
	}
	sort.Slice(out.Uncertain, func(i, k int) bool { return out.Uncertain[i].UID < out.Uncertain[k].UID })
	if out.Damage == nil && len(out.Aside) == 0 && len(out.Uncertain) == 0 {
		return nil, nil
	}
	return out, nil
}

// dryRunRecovery copies the record to a temporary directory and opens the
// copy as the agent does, with MoveCorruptAside, so that what is reported
// is exactly what the agent's next start will do.
func dryRunRecovery(ctx context.Context, dir, boot string) (*damageReport, []uncertainEntry, error) {
	tmp, err := os.MkdirTemp("", "dranodectl-recovery-")
	if err != nil {
		return nil, nil, fmt.Errorf("recovery dry run: %w", err)
	}
	defer os.RemoveAll(tmp)
	cp := filepath.Join(tmp, "record")
	if err := copyDirDurably(ctx, dir, cp); err != nil {
		return nil, nil, fmt.Errorf("recovery dry run: copy %s: %w", dir, err)
	}
	c, rep, err := claimcache.Open(cp, boot, claimcache.WithJournalOptions(checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside)))
	if err != nil {
		return nil, nil, fmt.Errorf("recovery dry run on a copy of %s: the agent's recovery would fail: %w", dir, err)
	}
	defer c.Close()
	var uncertain []uncertainEntry
	for _, e := range rep.Uncertain {
		uncertain = append(uncertain, uncertainOf(e))
	}
	for i := range uncertain {
		uncertain[i].Reason = strings.ReplaceAll(uncertain[i].Reason, cp, dir)
	}
	d := rep.Damage
	if d == nil {
		// The copy recovered without damage: the record changed since it
		// was read.
		return nil, uncertain, fmt.Errorf("recovery dry run: %s was not damaged when copied; read it again", dir)
	}
	out := &damageReport{
		File:            filepath.Join(dir, filepath.Base(d.Cause.Path)),
		Offset:          d.Cause.Offset,
		Reason:          d.Cause.Reason,
		KeptRecords:     d.KeptRecords,
		UnreadableBytes: d.UnreadableBytes,
		Unknown:         d.Unknown,
	}
	if d.Cause.Err != nil {
		out.Reason += ": " + d.Cause.Err.Error()
	}
	for _, l := range d.Lost {
		out.Lost = append(out.Lost, strings.ReplaceAll(l, cp, dir))
	}
	for _, u := range d.Uncertain {
		out.Claims = append(out.Claims, uncertainClaim{UID: u.Claim.UID, Namespace: u.Claim.Namespace, Name: u.Claim.Name,
			Recorded: u.Recorded, LastSeen: u.LastSeen, Conflict: u.Conflict})
	}
	return out, uncertain, nil
}

func uncertainOf(e claimcache.Entry) uncertainEntry {
	u := uncertainEntry{UID: e.Claim.UID, Namespace: e.Claim.Namespace, Name: e.Claim.Name, Reason: e.Uncertain}
	for _, driver := range slices.Sorted(maps.Keys(e.Drivers)) {
		for _, d := range e.Drivers[driver] {
			u.Devices = append(u.Devices, fmt.Sprintf("%s %s/%s", driver, d.Pool, d.Device))
		}
	}
	return u
}

func (r *recoveryReport) table(w *tabwriter.Writer) {
	if d := r.Damage; d != nil {
		fmt.Fprintf(w, "DAMAGE\t%s at offset %d: %s\n", d.File, d.Offset, d.Reason)
		fmt.Fprintf(w, "RECORDS KEPT\t%d (the agent's next start restores these and moves the rest aside)\n", d.KeptRecords)
		fmt.Fprintf(w, "UNREADABLE BYTES\t%d\n", d.UnreadableBytes)
		for _, l := range d.Lost {
			fmt.Fprintf(w, "LOST\t%s\n", l)
		}
		if d.Unknown {
			fmt.Fprintf(w, "UNKNOWN\tsome changes could not be read: claims other than those listed may be affected\n")
		}
	}
	for _, a := range r.Aside {
		fmt.Fprintf(w, "ASIDE\t%s (%d bytes of %s, %s)\n", a.Name, a.Bytes, a.From, a.Time.Format(time.RFC3339))
	}
	if len(r.Uncertain) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "UNCERTAIN CLAIM\tUID\tDEVICES\tREASON")
		for _, u := range r.Uncertain {
			devices := strings.Join(u.Devices, ",")
			if devices == "" {
				devices = "-"
			}
			fmt.Fprintf(w, "%s/%s\t%s\t%s\t%s\n", u.Namespace, u.Name, u.UID, devices, u.Reason)
		}
	}
	if d := r.Damage; d != nil {
		var unrecorded []uncertainClaim
		for _, c := range d.Claims {
			if !c.Recorded {
				unrecorded = append(unrecorded, c)
			}
		}
		if len(unrecorded) > 0 {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "UNRECORDABLE CLAIM\tUID\tLAST SEEN\tCONFLICT")
			for _, c := range unrecorded {
				fmt.Fprintf(w, "%s/%s\t%s\t%s\t%s\n", c.Namespace, c.Name, c.UID, c.LastSeen, c.Conflict)
			}
		}
	}
}
