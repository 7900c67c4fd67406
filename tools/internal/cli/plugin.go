package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/pluginmgr/conformance"
	"github.com/dranode/dranode/tools/internal/regularfile"
)

// ErrNotConformant: the plugin failed at least one conformance check.
var ErrNotConformant = errors.New("plugin is not conformant")

// conformanceChecks are the areas the kit covers, in the order it runs them,
// with the prefixes of the kit's messages that belong to each (longest
// first, so that "Unprepare of ..." is not taken for "Unprepare").
var conformanceChecks = []struct {
	name     string
	prefixes []string
}{
	{"Info is valid", []string{"Info:"}},
	{"inventory passes the ResourceSlice rules", []string{"no inventory", "inventory:", "the inventory has no device"}},
	{"Prepare succeeds, is idempotent, returns usable edits", []string{"first Prepare", "repeated Prepare", "Prepare:", "Prepare returned", "Prepare is not idempotent"}},
	{"admin access is granted beside the device's owner", []string{"Prepare with admin access", "Unprepare of an admin-access claim", "Prepare of the owner after an admin-access claim", "the owner's Prepare"}},
	{"each share of a multi-allocation device is answered once", []string{"Prepare of shares of", "Prepare of claim", "Unprepare of a claim with shares"}},
	{"Unprepare of unknown claims succeeds", []string{"Unprepare of a claim never prepared", "Unprepare of an unknown claim"}},
	{"Unprepare succeeds and is idempotent", []string{"repeated Unprepare", "Unprepare"}},
}

type checkResult struct {
	Check    string   `json:"check"`
	Result   string   `json:"result"` // passed, failed, not run
	Failures []string `json:"failures,omitempty"`
}

type pluginReport struct {
	Binary        string        `json:"binary"`
	SHA256        string        `json:"sha256"`
	Driver        string        `json:"driver"`
	DriverVersion string        `json:"driverVersion"`
	Pools         int           `json:"pools"`
	Devices       int           `json:"devices"`
	Passed        bool          `json:"passed"`
	Checks        []checkResult `json:"checks"`
}

func (r *pluginReport) table(w *tabwriter.Writer) {
	fmt.Fprintf(w, "BINARY\t%s\nDRIVER\t%s %s\nINVENTORY\t%d pool(s), %d device(s)\n\n", r.Binary, r.Driver, r.DriverVersion, r.Pools, r.Devices)
	fmt.Fprintln(w, "CHECK\tRESULT")
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%s\t%s\n", c.Check, c.Result)
		for _, f := range c.Failures {
			fmt.Fprintf(w, "  %s\t\n", f)
		}
	}
	verdict := "PASS"
	if !r.Passed {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "\nVERDICT\t%s\n", verdict)
}

// maxPluginConfigBytes bounds the --config file plugin check reads whole:
// an agent configuration or a driver's section of it.
const maxPluginConfigBytes = 16 << 20

func pluginCommand() *cobra.Command {
	check := &cobra.Command{
		Use:   "check BINARY",
		Short: "run the conformance kit against a driver plugin binary and print what passed and what failed",
		Long: `Starts BINARY as the agent would (go-plugin handshake, Configure with the
driver's config section, Info), waits for its first inventory, then prepares and
unprepares a claim on its first device. --config is the driver's config section
(JSON or YAML), or an agent configuration (plugins.drivers, or a plugins list),
whose entry for this binary (by path or name; the only one if there is one) is
used.`,
		Args: exactArgs("BINARY"),
	}
	fs := check.Flags()
	config := fs.String("config", "", "driver config section or agent config file (JSON or YAML)")
	node := fs.String("node", "dranodectl-check", "node name handed to Configure")
	timeout := fs.Duration("timeout", 30*time.Second, "bound on each call and on the wait for the first inventory")
	verbose := fs.BoolP("verbose", "v", false, "show the plugin's log on stderr")
	leaf(check, func(c *cobra.Command, args []string, format outputFormat) error {
		return runPluginCheck(c, args[0], *config, *node, *timeout, *verbose, format)
	})
	return group(&cobra.Command{Use: "plugin", Short: "exercise a driver plugin binary"}, check)
}

func runPluginCheck(c *cobra.Command, binary, configPath, node string, timeout time.Duration, verbose bool, format outputFormat) error {
	abs, err := filepath.Abs(binary)
	if err != nil {
		return fmt.Errorf("plugin check: %w", err)
	}
	sum, err := fileSHA256(abs)
	if err != nil {
		return fmt.Errorf("plugin check: %w", err)
	}
	var cfg json.RawMessage
	var args []string
	if configPath != "" {
		if cfg, args, err = loadPluginConfig(configPath, abs); err != nil {
			return fmt.Errorf("plugin check: --config %s: %w", configPath, err)
		}
	}
	logOut := io.Discard
	if verbose {
		logOut = c.ErrOrStderr()
	}
	ctx := c.Context()
	logger := hclog.New(&hclog.LoggerOptions{Name: "plugin", Output: logOut, Level: hclog.Info})
	p, err := pluginmgr.Launch(ctx, pluginmgr.PluginConfig{Path: abs, SHA256: sum, Args: args, Config: cfg},
		pluginmgr.Options{NodeName: node, Logger: logger, StartTimeout: timeout, CallTimeout: timeout})
	if err != nil {
		return fmt.Errorf("plugin check: start %s: %w", binary, err)
	}
	defer p.Close()

	rec := newRecorder(ctx, "plugin check "+filepath.Base(abs))
	rec.run(func(t testing.TB) { conformance.Run(t, p, conformance.Options{Timeout: timeout}) })
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("plugin check %s: %w", binary, context.Cause(ctx))
	}

	info := p.Info()
	inv, _ := p.Inventory()
	rep := &pluginReport{Binary: abs, SHA256: sum, Driver: info.DriverName, DriverVersion: info.DriverVersion, Pools: len(inv.Pools)}
	for _, pool := range inv.Pools {
		rep.Devices += len(pool.Devices)
	}
	rep.Checks, rep.Passed = classify(rec)
	if err := render(c.OutOrStdout(), format, rep); err != nil {
		return err
	}
	if !rep.Passed {
		return fmt.Errorf("plugin check %s: %w", binary, ErrNotConformant)
	}
	return nil
}

// classify sorts the kit's failures into its checks. After a fatal failure
// the checks the kit had not reached are "not run".
func classify(rec *recorder) ([]checkResult, bool) {
	results := make([]checkResult, len(conformanceChecks))
	for i, c := range conformanceChecks {
		results[i] = checkResult{Check: c.name, Result: "passed"}
	}
	var other []string
	last := -1
	for _, m := range rec.messages {
		if !m.Failure {
			continue
		}
		text := strings.TrimPrefix(m.Text, "conformance: ")
		idx := -1
		longest := 0
		for i, c := range conformanceChecks {
			for _, p := range c.prefixes {
				if strings.HasPrefix(text, p) && len(p) > longest {
					idx, longest = i, len(p)
				}
			}
		}
		if idx < 0 {
			other = append(other, text)
			continue
		}
		results[idx].Result = "failed"
		results[idx].Failures = append(results[idx].Failures, text)
		last = max(last, idx)
	}
	if rec.stopped && !rec.skipped {
		for i := last + 1; i < len(results); i++ {
			results[i].Result = "not run"
		}
	}
	if len(other) > 0 {
		results = append(results, checkResult{Check: "other", Result: "failed", Failures: other})
	}
	return results, !rec.Failed()
}

func fileSHA256(path string) (string, error) {
	f, err := regularfile.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f.Reader()); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// loadPluginConfig reads a driver config section, or picks the section for
// binary out of an agent configuration's "plugins" list.
func loadPluginConfig(path, binary string) (json.RawMessage, []string, error) {
	data, err := regularfile.ReadAll(path, maxPluginConfigBytes, "plugin configuration")
	if err != nil {
		return nil, nil, err
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, nil, fmt.Errorf("neither JSON nor YAML: %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return nil, nil, fmt.Errorf("want an object: %w", err)
	}
	list, ok := top["plugins"]
	if !ok {
		return js, nil, nil
	}
	// The agent's configuration nests the list under plugins.drivers;
	// examples/config/gpu-plugin.yaml has it directly under plugins.
	var nested struct {
		Drivers json.RawMessage `json:"drivers"`
	}
	if json.Unmarshal(list, &nested) == nil && nested.Drivers != nil {
		list = nested.Drivers
	}
	var plugins []struct {
		Name   string          `json:"name"`
		Path   string          `json:"path"`
		Args   []string        `json:"args"`
		Config json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal(list, &plugins); err != nil {
		return nil, nil, fmt.Errorf("plugins: %w", err)
	}
	for _, p := range plugins {
		if (p.Path != "" && filepath.Clean(p.Path) == binary) || (p.Name != "" && p.Name == filepath.Base(binary)) || len(plugins) == 1 {
			return p.Config, p.Args, nil
		}
	}
	return nil, nil, fmt.Errorf("plugins: no entry for %s (by path or name) among %d", binary, len(plugins))
}
