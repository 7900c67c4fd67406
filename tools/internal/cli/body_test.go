package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/dranode/dranode/claimcache"
	"github.com/dranode/dranode/tools/internal/ckptfmt"
)

// inspect streams a dranode file's records; what it prints must be what
// printing the whole file at once (ckptfmt.Parse, then the report marshalled
// or tabulated in one go) prints, for every format, for valid, torn and
// corrupt files.
func TestInspectStreamsWhatTheWholeFilePrints(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "claims")
	writeClaimRecord(t, dir, claimcache.ClaimRef{Namespace: "ml", Name: "a", UID: "uid-a"}, claimcache.ClaimRef{Namespace: "ml", Name: "b<&>", UID: "uid-b"})
	log := mustReadFile(t, filepath.Join(dir, "log.1"))
	files := map[string][]byte{
		"claim record log":     log,
		"torn tail":            append(bytes.Clone(log), 40, 0, 0, 0, 1, 2),
		"record damaged":       flipIn("uid-b")(bytes.Clone(log)),
		"header damaged":       flipIn("claimcache")(bytes.Clone(log)),
		"checkpoint file":      mustReadFile(t, "../../../checkpoint/testdata/file-v1.ckpt"),
		"claimcache format 0":  mustReadFile(t, filepath.Join(format0Journal, "log.1")),
		"short magic":          []byte("DRN"),
		"header only, no more": log[:8+8+int(log[8])],
	}
	for name, data := range files {
		for _, format := range []outputFormat{formatTable, formatJSON, formatYAML} {
			t.Run(fmt.Sprintf("%s/%s", name, format), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "file")
				if err := os.WriteFile(path, data, 0o600); err != nil {
					t.Fatal(err)
				}
				r := dranodectl(t, "checkpoint", "inspect", path, "-o", string(format))
				if r.stdout == "" {
					t.Fatalf("printed nothing; stderr: %s", r.stderr)
				}
				if want := printedWhole(t, path, data, format, r.code != 0); r.stdout != want {
					t.Errorf("streamed:\n%s\nwhole:\n%s", r.stdout, want)
				}
			})
		}
	}
}

// printedWhole is inspect's output the way it was made before it streamed:
// the report holding every record, printed at once.
func printedWhole(t *testing.T, path string, data []byte, format outputFormat, failed bool) string {
	t.Helper()
	rep := &checkpointReport{Path: path, Checksum: "ok", contents: true}
	if _, err := recognise(context.Background(), rep, path, bytes.NewReader(data), int64(len(data))); err != nil {
		rep.Checksum = "FAILED"
	}
	if failed != (rep.Checksum == "FAILED") {
		t.Fatalf("inspect failed: %v, the report says %s", failed, rep.Checksum)
	}
	p, _ := ckptfmt.Parse(data)
	if p == nil {
		t.Fatal("not a dranode file")
	}
	rep.Dranode = p
	var out []byte
	var err error
	switch format {
	case formatJSON:
		out, err = json.MarshalIndent(rep, "", "  ")
		out = append(out, '\n')
	case formatYAML:
		out, err = yaml.Marshal(rep)
	default:
		var b bytes.Buffer
		tw := newTabWriter(&b)
		rep.table(tw)
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "TYPE\t%s\n", p.Type)
		for _, r := range p.Records {
			if r.Document != nil {
				fmt.Fprintf(tw, "DOCUMENT\t%s\n", r.Document)
			}
			for _, c := range r.Changes {
				fmt.Fprintf(tw, "@%d %s\t%s %s\n", r.Offset, c.Op, c.Key, c.Value)
			}
		}
		err = tw.Flush()
		out = b.Bytes()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func mustReadFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The top-level split puts the streamed block where sorted keys put it.
func TestSplitTopLevel(t *testing.T) {
	doc := []byte("checksum: ok\nformat: x\n  dranode-like: indented\npath: p\n")
	before, after := splitTopLevel(doc, "dranode")
	if string(before) != "checksum: ok\n" || !strings.HasPrefix(string(after), "format: x\n") {
		t.Errorf("split into %q and %q", before, after)
	}
	before, after = splitTopLevel([]byte("a: 1\n"), "dranode")
	if string(before) != "a: 1\n" || after != nil {
		t.Errorf("split into %q and %q", before, after)
	}
}
