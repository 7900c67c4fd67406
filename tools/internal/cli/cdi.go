package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/dranode/dranode/cdi"
	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/tools/internal/regularfile"
)

// ErrInvalidSpecs: cdi validate found at least one spec with problems.
var ErrInvalidSpecs = errors.New("invalid CDI specs")

// maxSpecBytes bounds a CDI spec file dranodectl reads whole. The CDI
// format sets no limit; a spec holds a few device entries and edits, so
// anything near this is not a spec.
const maxSpecBytes = 16 << 20

func cdiCommand() *cobra.Command {
	parse := leaf(&cobra.Command{
		Use:   "parse NAME",
		Short: "split a fully qualified CDI device name (vendor/class=name) and check every part",
		Args:  exactArgs("NAME"),
	}, func(c *cobra.Command, args []string, format outputFormat) error {
		return runCDIParse(c.OutOrStdout(), args[0], format)
	})

	validate := leaf(&cobra.Command{
		Use:   "validate PATH",
		Short: "validate a CDI spec file, or every spec (*.json, *.yaml) in a directory, listing every problem",
		Long: `Specs are checked by the rules container runtimes apply when they load them.
The command fails if any spec has a problem; every problem of every spec is
listed first.`,
		Args: exactArgs("PATH"),
	}, func(c *cobra.Command, args []string, format outputFormat) error {
		return runCDIValidate(c.OutOrStdout(), args[0], format)
	})

	sweep := &cobra.Command{
		Use:   "sweep --driver NAME | --kind VENDOR/CLASS [--keep UID,...] [--dir DIR] [--yes]",
		Short: "remove a driver's transient specs of claims no longer held (dry run unless --yes)",
		Long: `Lists (or with --yes removes) the files "<vendor>-<class>_<claim UID>.json" in
--dir whose kind is exactly vendor/class and whose claim UID is not in --keep.
The dranode agent writes a driver's specs as kind <driver name>/claim, which
--driver selects; --kind names any other vendor/class. Other drivers' files,
and files that cannot be read as a spec, are never touched.

Every claim the agent's record (--record, read from a copy, as record
leftovers reads it: the agent may keep running) holds, prepared or on its
way, keeps its spec as if it were in --keep: removing it would take a
running container's devices away at its next start. Without a record to
read the command refuses, unless --ignore-record says the record is gone
on purpose.`,
		Args: exactArgs(),
	}
	fs := sweep.Flags()
	dir := fs.String("dir", "/var/run/cdi", "CDI spec directory")
	driver := fs.String("driver", "", "DRA driver name; its specs are of kind <driver>/"+cdi.ClaimClass+", as the dranode agent writes them")
	kind := fs.String("kind", "", "the CDI kind (vendor/class) of the specs, for drivers that name them otherwise (instead of --driver)")
	keep := fs.String("keep", "", "comma-separated claim UIDs whose specs stay")
	record := fs.String("record", "/var/lib/dranode/claims.record", "the agent's claim record (stateDir/claims.record); its claims keep their specs")
	ignoreRecord := fs.Bool("ignore-record", false, "do not read the agent's record: only --keep keeps a spec")
	yes := fs.Bool("yes", false, "really remove the files (default: only list them)")
	fs.BoolVar(yes, "apply", false, "same as --yes")
	leaf(sweep, func(c *cobra.Command, _ []string, format outputFormat) error {
		if *ignoreRecord && c.Flags().Changed("record") {
			return usagef("give --record or --ignore-record, not both")
		}
		k := *kind
		switch {
		case *driver != "" && k != "":
			return usagef("give --driver or --kind, not both")
		case *driver != "":
			k = *driver + "/" + cdi.ClaimClass
		case k == "":
			return usagef("--driver (or --kind) is required")
		}
		rec := *record
		if *ignoreRecord {
			rec = ""
		}
		return runCDISweep(c.Context(), c.OutOrStdout(), *dir, k, *keep, rec, *yes, format)
	})

	return group(&cobra.Command{
		Use:   "cdi",
		Short: "parse CDI device names, validate spec files, sweep leaked transient specs",
	}, parse, validate, sweep)
}

type cdiName struct {
	Name   string `json:"name"`
	Vendor string `json:"vendor"`
	Class  string `json:"class"`
	Device string `json:"device"`
	Kind   string `json:"kind"`
}

func (n *cdiName) table(w *tabwriter.Writer) {
	fmt.Fprintln(w, "VENDOR\tCLASS\tDEVICE\tKIND")
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", n.Vendor, n.Class, n.Device, n.Kind)
}

func runCDIParse(stdout io.Writer, qualified string, format outputFormat) error {
	vendor, class, name, err := cdi.ParseQualifiedName(qualified)
	if err != nil {
		return fmt.Errorf("cdi parse: %w", err)
	}
	return render(stdout, format, &cdiName{Name: qualified, Vendor: vendor, Class: class, Device: name, Kind: vendor + "/" + class})
}

// specResult is one spec file's verdict.
type specResult struct {
	File     string   `json:"file"`
	Kind     string   `json:"kind,omitempty"`
	Version  string   `json:"cdiVersion,omitempty"`
	Devices  []string `json:"devices,omitempty"`
	Valid    bool     `json:"valid"`
	Problems []string `json:"problems,omitempty"`
}

type validateReport struct {
	Specs   []specResult `json:"specs"`
	Invalid int          `json:"invalid"`
}

func (r *validateReport) table(w *tabwriter.Writer) {
	fmt.Fprintln(w, "FILE\tKIND\tVERSION\tDEVICES\tRESULT")
	for _, s := range r.Specs {
		res := "valid"
		if !s.Valid {
			res = fmt.Sprintf("%d problem(s)", len(s.Problems))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", s.File, dash(s.Kind), dash(s.Version), len(s.Devices), res)
	}
	for _, s := range r.Specs {
		for _, p := range s.Problems {
			fmt.Fprintf(w, "%s: %s\n", s.File, p)
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func runCDIValidate(stdout io.Writer, path string, format outputFormat) error {
	files, err := specFiles(path)
	if err != nil {
		return fmt.Errorf("cdi validate: %w", err)
	}
	rep := &validateReport{Specs: []specResult{}}
	kinds := map[string]map[string]string{} // kind -> device -> file: runtimes refuse a device defined twice
	for _, f := range files {
		res := validateSpecFile(f)
		for _, d := range res.Devices {
			if res.Kind == "" {
				break
			}
			if kinds[res.Kind] == nil {
				kinds[res.Kind] = map[string]string{}
			}
			if other, dup := kinds[res.Kind][d]; dup {
				res.Problems = append(res.Problems, fmt.Sprintf("device %s=%s is also defined in %s", res.Kind, d, other))
				res.Valid = false
			} else {
				kinds[res.Kind][d] = f
			}
		}
		if !res.Valid {
			rep.Invalid++
		}
		rep.Specs = append(rep.Specs, res)
	}
	if err := render(stdout, format, rep); err != nil {
		return err
	}
	if rep.Invalid > 0 {
		return fmt.Errorf("cdi validate: %d of %d spec(s) invalid: %w", rep.Invalid, len(rep.Specs), ErrInvalidSpecs)
	}
	return nil
}

// specFiles returns path itself, or the spec files of the directory path in
// name order (the order runtimes load them in).
func specFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		if !st.Mode().IsRegular() {
			return nil, &regularfile.NotRegularError{Path: path, Mode: st.Mode()}
		}
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, en := range entries {
		ext := filepath.Ext(en.Name())
		if en.Type().IsRegular() && (ext == ".json" || ext == ".yaml" || ext == ".yml") {
			out = append(out, filepath.Join(path, en.Name()))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no spec files (*.json, *.yaml)", path)
	}
	sort.Strings(out)
	return out, nil
}

func validateSpecFile(path string) specResult {
	res := specResult{File: path}
	data, err := regularfile.ReadAll(path, maxSpecBytes, "CDI spec")
	if err != nil {
		res.Problems = []string{err.Error()}
		return res
	}
	if ext := filepath.Ext(path); ext == ".yaml" || ext == ".yml" {
		if data, err = yaml.YAMLToJSON(data); err != nil {
			res.Problems = []string{fmt.Sprintf("not YAML: %v", err)}
			return res
		}
	}
	spec, err := cdi.DecodeSpec(data)
	if err != nil {
		res.Problems = []string{err.Error()}
		return res
	}
	res.Kind, res.Version = spec.Kind, spec.Version
	for _, d := range spec.Devices {
		res.Devices = append(res.Devices, d.Name)
	}
	if err := spec.Validate(); err != nil {
		var se *cdi.SpecError
		if errors.As(err, &se) {
			for _, p := range se.Problems {
				res.Problems = append(res.Problems, p.String())
			}
		} else {
			res.Problems = []string{err.Error()}
		}
		return res
	}
	res.Valid = true
	return res
}

type sweepReport struct {
	Dir    string `json:"dir"`
	Kind   string `json:"kind"`
	DryRun bool   `json:"dryRun"`
	// Record is the claim record read; empty with --ignore-record.
	Record string `json:"record,omitempty"`
	// Recorded are the claim UIDs whose specs the record kept.
	Recorded []string `json:"recorded,omitempty"`
	Removed  []string `json:"removed"`
}

func (r *sweepReport) table(w *tabwriter.Writer) {
	verb := "REMOVED"
	if r.DryRun {
		verb = "WOULD REMOVE (dry run; --yes to remove)"
	}
	if r.Record != "" {
		fmt.Fprintf(w, "record %s: %d claim(s) kept\n", r.Record, len(r.Recorded))
	}
	fmt.Fprintln(w, verb)
	for _, f := range r.Removed {
		fmt.Fprintln(w, f)
	}
}

func runCDISweep(ctx context.Context, stdout io.Writer, dir, kind, keepList, record string, apply bool, format outputFormat) error {
	vendor, class, err := cdi.ParseKind(kind)
	if err != nil {
		return fmt.Errorf("cdi sweep: kind %q: %w", kind, err)
	}
	keep := map[string]bool{}
	for _, uid := range strings.Split(keepList, ",") {
		if uid = strings.TrimSpace(uid); uid != "" {
			keep[uid] = true
		}
	}
	rep := &sweepReport{Dir: dir, Kind: kind, DryRun: !apply, Record: record, Removed: []string{}}
	if record != "" {
		uids, err := recordedClaims(ctx, record)
		if err != nil {
			return fmt.Errorf("cdi sweep: the agent's record %s: %w (its claims' specs must stay; point --record at stateDir/claims.record, or give --ignore-record if the record is gone on purpose)", record, err)
		}
		for _, uid := range uids {
			keep[uid] = true
		}
		rep.Recorded = uids
	}
	keepFn := func(uid string) bool { return keep[uid] }
	if apply {
		var removed []string
		removed, err = cdi.SpecDir{Path: dir}.Sweep(vendor, class, keepFn)
		rep.Removed = append(rep.Removed, removed...)
	} else {
		rep.Removed, err = sweepCandidates(dir, vendor, class, keepFn)
	}
	slices.Sort(rep.Removed)
	if perr := render(stdout, format, rep); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return fmt.Errorf("cdi sweep: %w", err)
	}
	return nil
}

// recordedClaims returns the UIDs of every claim the record at dir holds,
// in any state, read from a copy so that the agent holding the record keeps
// it (and its lock) undisturbed.
func recordedClaims(ctx context.Context, dir string) ([]string, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "dranodectl-sweep-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	cp := filepath.Join(tmp, "record")
	if err := copyDirDurably(ctx, dir, cp); err != nil {
		return nil, fmt.Errorf("copy: %w", err)
	}
	boot, err := claimcache.ReadBootID()
	if err != nil {
		boot = "unknown" // a stale claim keeps its spec all the same
	}
	cache, _, err := claimcache.Open(cp, boot)
	if err != nil {
		return nil, err
	}
	defer cache.Close()
	var uids []string
	for _, e := range cache.List() {
		uids = append(uids, e.Claim.UID)
	}
	slices.Sort(uids)
	return uids, nil
}

// sweepCandidates lists what SpecDir.Sweep would remove, by the same rule:
// the transient file name of vendor/class, a spec whose own kind is exactly
// vendor/class, and a claim UID keep does not want. Unreadable files are left
// alone and reported.
func sweepCandidates(dir, vendor, class string, keep func(string) bool) ([]string, error) {
	prefix := strings.TrimSuffix(cdi.TransientSpecFileName(vendor, class, "x"), "x.json")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := []string{}
	var errs []error
	for _, en := range entries {
		uid, ok := strings.CutPrefix(en.Name(), prefix)
		if !ok || !en.Type().IsRegular() {
			continue
		}
		if uid, ok = strings.CutSuffix(uid, ".json"); !ok || uid == "" {
			continue
		}
		path := filepath.Join(dir, en.Name())
		data, err := regularfile.ReadAll(path, maxSpecBytes, "CDI spec")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		spec, err := cdi.DecodeSpec(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: left alone: %w", path, err))
			continue
		}
		if spec.Kind != vendor+"/"+class || keep(uid) {
			continue
		}
		out = append(out, path)
	}
	return out, errors.Join(errs...)
}
