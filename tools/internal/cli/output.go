package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// Output formats accepted by -o.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

// outputFlag registers -o/--output on fs.
func outputFlag(fs *flag.FlagSet) *string {
	o := new(string)
	*o = formatTable
	fs.StringVar(o, "o", formatTable, "output format: table, json or yaml")
	fs.StringVar(o, "output", formatTable, "same as -o")
	return o
}

func checkFormat(format string) error {
	switch format {
	case formatTable, formatJSON, formatYAML:
		return nil
	}
	return usagef("-o %q: want table, json or yaml", format)
}

// tabler is a result that knows its human form.
type tabler interface {
	table(w *tabwriter.Writer)
}

// render writes v in the chosen format: json and yaml from v's JSON encoding,
// table from v.table.
func render(w io.Writer, format string, v tabler) error {
	switch format {
	case formatJSON:
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("encode JSON output: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case formatYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode YAML output: %w", err)
		}
		_, err = w.Write(b)
		return err
	default:
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		v.table(tw)
		return tw.Flush()
	}
}
