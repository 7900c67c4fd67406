package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"sigs.k8s.io/yaml"

	"github.com/dranode/dranode/tools/internal/ckptfmt"
)

// dranodeBody is the contents of a dranode file that inspect prints. The
// file is read twice, each time as a stream: once to verify it (and measure
// the table's first column), once to print its records, so that a log of
// any size costs one frame of memory. The printed form is exactly that of
// the report with Dranode set to ckptfmt.Parse's result.
type dranodeBody struct {
	r    io.ReaderAt
	size int64
	sum  *ckptfmt.Summary
	col  int // width of the table's first column, as tabwriter would make it
}

// measure is the verifying pass's visitor: it sizes the first column of the
// record table.
func (b *dranodeBody) measure(_ *ckptfmt.Summary, r *ckptfmt.Record) error {
	if r.Document != nil {
		b.col = max(b.col, len("DOCUMENT"))
	}
	for _, c := range r.Changes {
		b.col = max(b.col, len(recordCell(r.Offset, c.Op)))
	}
	return nil
}

func recordCell(offset int64, op string) string {
	return "@" + strconv.FormatInt(offset, 10) + " " + op
}

// each calls fn with every record that verified in the first pass. The
// damage that ended that pass ends this one again, already reported.
func (b *dranodeBody) each(ctx context.Context, fn func(*ckptfmt.Record) error) error {
	_, err := ckptfmt.Scan(ctx, b.r, b.size, func(_ *ckptfmt.Summary, r *ckptfmt.Record) error { return fn(r) })
	if errors.Is(err, ckptfmt.ErrCorrupt) {
		return nil
	}
	return err
}

// renderCheckpoint prints rep, followed for a dranode file (body not nil)
// by its records, streamed in the chosen format.
func renderCheckpoint(ctx context.Context, w io.Writer, format outputFormat, rep *checkpointReport, body *dranodeBody) error {
	if body == nil {
		return render(w, format, rep)
	}
	buf := bufio.NewWriterSize(w, 64<<10)
	err := body.render(ctx, buf, format, rep)
	if ferr := buf.Flush(); err == nil {
		err = ferr
	}
	return err
}

func (body *dranodeBody) render(ctx context.Context, w io.Writer, format outputFormat, rep *checkpointReport) error {
	switch format {
	case formatJSON:
		return body.json(ctx, w, rep)
	case formatYAML:
		return body.yaml(ctx, w, rep)
	}
	if err := render(w, format, rep); err != nil {
		return err
	}
	col := max(body.col, len("TYPE"))
	bw := &errWriter{w: w}
	fmt.Fprintf(bw, "\n%-*s  %s\n", col, "TYPE", body.sum.Type)
	err := body.each(ctx, func(r *ckptfmt.Record) error {
		if r.Document != nil {
			fmt.Fprintf(bw, "%-*s  %s\n", col, "DOCUMENT", r.Document)
		}
		for _, c := range r.Changes {
			fmt.Fprintf(bw, "%-*s  %s %s\n", col, recordCell(r.Offset, c.Op), c.Key, c.Value)
		}
		return bw.err
	})
	if err != nil {
		return err
	}
	return bw.err
}

// json writes what json.MarshalIndent(rep with Dranode, "", "  ") would,
// one record at a time.
func (b *dranodeBody) json(ctx context.Context, w io.Writer, rep *checkpointReport) error {
	top, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encode JSON output: %w", err)
	}
	bw := &errWriter{w: w}
	bw.Write(bytes.TrimSuffix(top, []byte("\n}")))
	hdr, err := json.MarshalIndent(b.sum.Header, "    ", "  ")
	if err != nil {
		return fmt.Errorf("encode JSON output: %w", err)
	}
	typ, _ := json.Marshal(b.sum.Type)
	fmt.Fprintf(bw, ",\n  \"dranode\": {\n    \"type\": %s,\n    \"header\": %s,\n    \"records\": [", typ, hdr)
	n := 0
	err = b.each(ctx, func(r *ckptfmt.Record) error {
		rec, err := json.MarshalIndent(r, "      ", "  ")
		if err != nil {
			return fmt.Errorf("encode JSON output: %w", err)
		}
		if n > 0 {
			bw.Write([]byte(","))
		}
		n++
		fmt.Fprintf(bw, "\n      %s", rec)
		return bw.err
	})
	if err != nil {
		return err
	}
	if n > 0 {
		bw.Write([]byte("\n    "))
	}
	bw.Write([]byte("]"))
	if tt := b.sum.TornTail; tt != nil {
		t, err := json.MarshalIndent(tt, "    ", "  ")
		if err != nil {
			return fmt.Errorf("encode JSON output: %w", err)
		}
		fmt.Fprintf(bw, ",\n    \"tornTail\": %s", t)
	}
	bw.Write([]byte("\n  }\n}\n"))
	return bw.err
}

// yaml writes what yaml.Marshal(rep with Dranode) would, one record at a
// time. sigs.k8s.io/yaml sorts keys, so the dranode block goes between
// the report's top-level keys that sort before and after it; each piece is
// marshalled at its place in the document, so that indentation and line
// folding come out as in the whole.
func (b *dranodeBody) yaml(ctx context.Context, w io.Writer, rep *checkpointReport) error {
	top, err := yaml.Marshal(rep)
	if err != nil {
		return fmt.Errorf("encode YAML output: %w", err)
	}
	before, after := splitTopLevel(top, "dranode")
	bw := &errWriter{w: w}
	bw.Write(before)
	// piece marshals {"dranode": {key: v}} and drops the lines of the
	// enclosing keys, leaving v's lines as the whole document has them.
	piece := func(key string, v any, drop int) error {
		out, err := yaml.Marshal(map[string]map[string]any{"dranode": {key: v}})
		if err != nil {
			return fmt.Errorf("encode YAML output: %w", err)
		}
		for range drop {
			out = out[bytes.IndexByte(out, '\n')+1:]
		}
		bw.Write(out)
		return nil
	}
	bw.Write([]byte("dranode:\n"))
	if err := piece("header", b.sum.Header, 1); err != nil {
		return err
	}
	n := 0
	err = b.each(ctx, func(r *ckptfmt.Record) error {
		if n == 0 {
			bw.Write([]byte("  records:\n"))
		}
		n++
		if err := piece("records", []*ckptfmt.Record{r}, 2); err != nil {
			return err
		}
		return bw.err
	})
	if err != nil {
		return err
	}
	if n == 0 {
		bw.Write([]byte("  records: []\n"))
	}
	if b.sum.TornTail != nil {
		if err := piece("tornTail", b.sum.TornTail, 1); err != nil {
			return err
		}
	}
	if err := piece("type", b.sum.Type, 1); err != nil {
		return err
	}
	bw.Write(after)
	return bw.err
}

// splitTopLevel splits a YAML mapping document before the first top-level
// key that sorts after key.
func splitTopLevel(doc []byte, key string) (before, after []byte) {
	for off := 0; off < len(doc); {
		end := bytes.IndexByte(doc[off:], '\n')
		if end < 0 {
			end = len(doc) - off
		}
		line := doc[off : off+end]
		if len(line) > 0 && line[0] != ' ' && line[0] != '-' {
			if k, _, ok := bytes.Cut(line, []byte(":")); ok && string(k) > key {
				return doc[:off], doc[off:]
			}
		}
		off += end + 1
	}
	return doc, nil
}

// errWriter keeps the first write error, so that a long run of writes can
// be checked once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
