package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// Output formats accepted by -o.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

// outputFormat is the value of -o/--output; a value other than the three
// formats is refused when the flag is parsed, as a usage error.
type outputFormat string

func (f *outputFormat) String() string { return string(*f) }
func (f *outputFormat) Type() string   { return "string" }

func (f *outputFormat) Set(v string) error {
	switch v {
	case formatTable, formatJSON, formatYAML:
		*f = outputFormat(v)
		return nil
	}
	return fmt.Errorf("-o %q: want table, json or yaml", v)
}

// outputFlag registers -o/--output on c.
func outputFlag(c *cobra.Command) *outputFormat {
	o := new(outputFormat)
	*o = formatTable
	c.Flags().VarP(o, "output", "o", "output format: table, json or yaml")
	return o
}

// tabler is a result that knows its human form.
type tabler interface {
	table(w *tabwriter.Writer)
}

// render writes v in the chosen format: json and yaml from v's JSON encoding,
// table from v.table.
func render(w io.Writer, format outputFormat, v tabler) error {
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
		tw := newTabWriter(w)
		v.table(tw)
		return tw.Flush()
	}
}

func newTabWriter(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }
