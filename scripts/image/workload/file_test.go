package workload_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dranode/dranode/scripts/image/workload"
)

func TestReadFiles(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"a/gpu-metadata.json": `{"kind":"DeviceMetadata"}`, "b/gpu-metadata.json": "", "b/other": "x"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name    string
		pattern string
		want    []workload.File
		wantErr string
	}{
		{"glob", filepath.Join(dir, "*", "*-metadata.json"), []workload.File{
			{Path: filepath.Join(dir, "a/gpu-metadata.json"), Content: `{"kind":"DeviceMetadata"}`},
			{Path: filepath.Join(dir, "b/gpu-metadata.json")},
		}, ""},
		{"no match", filepath.Join(dir, "c", "*"), []workload.File{}, ""},
		{"a directory", filepath.Join(dir, "a"), nil, "is a directory"},
		{"bad pattern", filepath.Join(dir, "["), nil, "syntax error in pattern"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := workload.ReadFiles(tt.pattern)
			if tt.wantErr != "" {
				if len(got) != 1 || !strings.Contains(got[0].Error, tt.wantErr) {
					t.Fatalf("ReadFiles(%q) = %+v, want one file with an error containing %q", tt.pattern, got, tt.wantErr)
				}
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ReadFiles(%q) = %+v, want %+v", tt.pattern, got, tt.want)
			}
		})
	}
}
