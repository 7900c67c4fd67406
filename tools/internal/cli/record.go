package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/dranode/dranode/checkpoint/kubeletcompat"
	"github.com/dranode/dranode/claimcache"
)

// errNoAPIServer stands for the lookups record leftovers does not make
// without --kubeconfig.
var errNoAPIServer = errors.New("not checked against the API server (no --kubeconfig)")

// leftoverRow is one recorded claim the kubelet's checkpoint does not list.
type leftoverRow struct {
	UID       string   `json:"uid"`
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	State     string   `json:"state"`
	Drivers   []string `json:"drivers,omitempty"`
	// Reason is the agent's claimcache.LeftoverReason; empty in Unchecked.
	Reason string `json:"reason,omitempty"`
	// Error says why an unchecked claim could not be classified.
	Error string `json:"error,omitempty"`
}

// leftoversReport is what record leftovers prints.
type leftoversReport struct {
	Record            string `json:"record"`
	KubeletCheckpoint string `json:"kubeletCheckpoint"`
	APIServer         bool   `json:"apiServer"`
	Recorded          int    `json:"recorded"`
	// Kept: entries the kubelet lists, or whose claim is in use.
	Kept int `json:"kept"`
	// Leftovers are what the agent's sweep cleans once they have been
	// leftovers for its grace period.
	Leftovers []leftoverRow `json:"leftovers"`
	// Unchecked: not listed by the kubelet, but the API server was not
	// (or could not be) asked.
	Unchecked []leftoverRow `json:"unchecked,omitempty"`
}

func recordCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "leftovers RECORD [--kubelet-checkpoint FILE] [--kubeconfig FILE]",
		Short: "list the recorded claims the agent's sweep would clean, changing nothing",
		Long: `RECORD is the agent's claim record directory (stateDir/claims.record). It is
copied and the copy opened, so the agent may keep running; nothing in RECORD,
the kubelet's checkpoint or the API server is changed.

A recorded claim is a leftover when the kubelet's DRA checkpoint does not list
it and the API server has no claim of its name, has it under another UID, or
has it reserved for no pod (reasons claim-deleted, claim-recreated,
claim-unreserved); the agent cleans it once it has been one for
cleanup.gracePeriod. Without --kubeconfig the claims the kubelet does not list
are shown as unchecked. An unreadable kubelet checkpoint is an error: the agent
sweeps nothing then either.`,
		Args: exactArgs("RECORD"),
	}
	kubelet := c.Flags().String("kubelet-checkpoint", "/var/lib/kubelet/"+kubeletcompat.DRAManagerStateFile, "the kubelet's DRA checkpoint")
	kubeconfig := c.Flags().String("kubeconfig", "", "kubeconfig file to ask the API server about the claims (empty: do not ask)")
	leaves := leaf(c, func(c *cobra.Command, args []string, format outputFormat) error {
		return runRecordLeftovers(c.Context(), c.OutOrStdout(), args[0], *kubelet, *kubeconfig, format)
	})
	return group(&cobra.Command{
		Use:   "record",
		Short: "read the agent's claim record against the kubelet and the API server",
	}, leaves)
}

func runRecordLeftovers(ctx context.Context, stdout io.Writer, dir, kubeletPath, kubeconfig string, format outputFormat) error {
	lookup := func(claimcache.ClaimRef) (claimcache.APIClaim, error) { return claimcache.APIClaim{}, errNoAPIServer }
	if kubeconfig != "" {
		api, err := newResourceAPI(kubeconfig)
		if err != nil {
			return fmt.Errorf("record leftovers: %w", err)
		}
		lookup = func(ref claimcache.ClaimRef) (claimcache.APIClaim, error) {
			c, err := api.claim(ctx, ref.Namespace, ref.Name)
			switch {
			case apierrors.IsNotFound(err):
				return claimcache.APIClaim{}, nil
			case err != nil:
				return claimcache.APIClaim{}, err
			}
			return claimcache.APIClaim{Exists: true, UID: string(c.UID),
				Reserved: c.Status.Allocation != nil && len(c.Status.ReservedFor) > 0}, nil
		}
	}
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("record leftovers: %w", err)
	}
	tmp, err := os.MkdirTemp("", "dranodectl-leftovers-")
	if err != nil {
		return fmt.Errorf("record leftovers: %w", err)
	}
	defer os.RemoveAll(tmp)
	cp := filepath.Join(tmp, "record")
	if err := copyDirDurably(ctx, dir, cp); err != nil {
		return fmt.Errorf("record leftovers: copy %s: %w", dir, err)
	}
	boot, err := claimcache.ReadBootID()
	if err != nil {
		boot = "unknown" // staleness does not decide what is a leftover
	}
	cache, _, err := claimcache.Open(cp, boot)
	if err != nil {
		return fmt.Errorf("record leftovers: reading a copy of %s: %w", dir, err)
	}
	defer cache.Close()
	var tr claimcache.LeftoverTracker
	found, err := tr.Find(cache, claimcache.LeftoverSource{
		Kubelet: func() (map[string]bool, error) {
			st, err := kubeletcompat.ReadDRAManagerState(kubeletPath)
			if err != nil {
				return nil, err
			}
			out := map[string]bool{}
			for _, c := range st.Claims {
				out[c.UID] = true
			}
			return out, nil
		},
		Lookup: lookup,
	}, time.Now(), 0)
	if err != nil {
		return fmt.Errorf("record leftovers: %w (the agent sweeps nothing either)", err)
	}
	rep := &leftoversReport{Record: dir, KubeletCheckpoint: kubeletPath, APIServer: kubeconfig != "",
		Recorded: cache.Len(), Kept: found.Kept, Leftovers: []leftoverRow{}}
	for _, l := range found.Leftovers {
		r := rowOf(l.Entry)
		r.Reason = string(l.Reason)
		rep.Leftovers = append(rep.Leftovers, r)
	}
	for _, err := range found.Errors {
		var ce *claimcache.CheckError
		if errors.As(err, &ce) {
			r := rowOf(ce.Entry)
			r.Error = ce.Err.Error()
			rep.Unchecked = append(rep.Unchecked, r)
		}
	}
	return render(stdout, format, rep)
}

func rowOf(e claimcache.Entry) leftoverRow {
	return leftoverRow{UID: e.Claim.UID, Namespace: e.Claim.Namespace, Name: e.Claim.Name, State: string(e.State),
		Drivers: slices.Sorted(maps.Keys(e.Drivers))}
}

func (r *leftoversReport) table(w *tabwriter.Writer) {
	fmt.Fprintf(w, "record %s: %d claims; kubelet checkpoint %s\n", r.Record, r.Recorded, r.KubeletCheckpoint)
	fmt.Fprintf(w, "%d kept, %d leftovers, %d unchecked\n", r.Kept, len(r.Leftovers), len(r.Unchecked))
	if len(r.Leftovers)+len(r.Unchecked) == 0 {
		return
	}
	fmt.Fprintln(w, "\nUID\tCLAIM\tSTATE\tDRIVERS\tLEFTOVER")
	for _, l := range r.Leftovers {
		fmt.Fprintf(w, "%s\t%s/%s\t%s\t%s\t%s\n", l.UID, l.Namespace, l.Name, l.State, strings.Join(l.Drivers, ","), l.Reason)
	}
	for _, l := range r.Unchecked {
		fmt.Fprintf(w, "%s\t%s/%s\t%s\t%s\tunchecked: %s\n", l.UID, l.Namespace, l.Name, l.State, strings.Join(l.Drivers, ","), l.Error)
	}
}
