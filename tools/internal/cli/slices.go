package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// poolSummary is one driver's pool on the node, as its ResourceSlices show it.
type poolSummary struct {
	Driver     string `json:"driver"`
	Pool       string `json:"pool"`
	Generation int64  `json:"generation"`
	// Slices is how many slices of that generation exist; SliceCount how many
	// the pool announces. They differ while a publisher is mid-update.
	Slices     int      `json:"slices"`
	SliceCount int64    `json:"resourceSliceCount"`
	Devices    int      `json:"devices"`
	Complete   bool     `json:"complete"`
	Stale      int      `json:"staleSlices,omitempty"` // slices of older generations
	Names      []string `json:"sliceNames"`
}

type slicesReport struct {
	Node  string        `json:"node"`
	Pools []poolSummary `json:"pools"`
}

func (r *slicesReport) table(w *tabwriter.Writer) {
	fmt.Fprintln(w, "DRIVER\tPOOL\tGENERATION\tSLICES\tDEVICES\tCOMPLETE")
	for _, p := range r.Pools {
		slices := fmt.Sprintf("%d/%d", p.Slices, p.SliceCount)
		if p.Stale > 0 {
			slices += fmt.Sprintf(" (+%d stale)", p.Stale)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%t\n", p.Driver, p.Pool, p.Generation, slices, p.Devices, p.Complete)
	}
}

func slicesCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "slices --node NODE [--kubeconfig FILE] [--driver NAME]",
		Short: "the ResourceSlices of a node, per driver and pool, with generation and device count",
		Long: `Lists the ResourceSlices whose spec.nodeName is --node and sums them per driver
and pool: the pool's newest generation, how many slices of it exist against how
many the pool announces, and their devices. Slices of older generations are
counted as stale (a publisher removes them once the new generation is
complete).`,
		Args: exactArgs(),
	}
	fs := c.Flags()
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	node := fs.String("node", "", "node name (required)")
	driver := fs.String("driver", "", "only this driver's slices")
	return leaf(c, func(c *cobra.Command, _ []string, format outputFormat) error {
		if *node == "" {
			return usagef("--node is required")
		}
		return runSlices(c.Context(), c.OutOrStdout(), *kubeconfig, *node, *driver, format)
	})
}

func runSlices(ctx context.Context, stdout io.Writer, kubeconfig, node, driver string, format outputFormat) error {
	api, err := newResourceAPI(kubeconfig)
	if err != nil {
		return fmt.Errorf("slices: %w", err)
	}
	sel := fields.OneTermEqualSelector("spec.nodeName", node)
	if driver != "" {
		sel = fields.AndSelectors(sel, fields.OneTermEqualSelector("spec.driver", driver))
	}
	var items []resourcev1.ResourceSlice
	opts := metav1.ListOptions{FieldSelector: sel.String(), Limit: 500}
	for {
		list, err := api.slices(ctx, opts)
		if err != nil {
			return fmt.Errorf("slices: list ResourceSlices of node %s: %w", node, err)
		}
		items = append(items, list.Items...)
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	rep := &slicesReport{Node: node, Pools: summarisePools(items)}
	return render(stdout, format, rep)
}

// summarisePools groups slices per driver and pool; only slices of a pool's
// newest generation count, as for the scheduler.
func summarisePools(items []resourcev1.ResourceSlice) []poolSummary {
	type key struct{ driver, pool string }
	byPool := map[key]*poolSummary{}
	for i := range items {
		s := &items[i].Spec
		k := key{s.Driver, s.Pool.Name}
		p := byPool[k]
		if p == nil {
			p = &poolSummary{Driver: s.Driver, Pool: s.Pool.Name, Generation: s.Pool.Generation, Names: []string{}}
			byPool[k] = p
		}
		switch {
		case s.Pool.Generation > p.Generation:
			p.Stale += p.Slices
			p.Generation, p.Slices, p.Devices, p.Names = s.Pool.Generation, 0, 0, []string{}
			fallthrough
		case s.Pool.Generation == p.Generation:
			p.Slices++
			p.SliceCount = s.Pool.ResourceSliceCount
			p.Devices += len(s.Devices)
			p.Names = append(p.Names, items[i].Name)
		default:
			p.Stale++
		}
	}
	out := make([]poolSummary, 0, len(byPool))
	for _, p := range byPool {
		p.Complete = int64(p.Slices) == p.SliceCount
		sort.Strings(p.Names)
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Driver != out[j].Driver {
			return out[i].Driver < out[j].Driver
		}
		return out[i].Pool < out[j].Pool
	})
	return out
}
