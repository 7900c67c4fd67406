package durable

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

func TestMkdirAllSyncsTheParentOfEachCreatedDirectory(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		noSync  bool
		syncs   uint64 // directory fsyncs expected
		wantErr bool
	}{
		{name: "three new levels", path: filepath.Join(root, "a", "b", "c"), syncs: 3},
		{name: "all exist", path: filepath.Join(root, "a", "b", "c"), syncs: 0},
		{name: "one new level under existing ones", path: filepath.Join(root, "a", "b", "d"), syncs: 1},
		{name: "no sync", path: filepath.Join(root, "x", "y"), noSync: true, syncs: 0},
		{name: "under a file", path: filepath.Join(file, "sub"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Uint64
			err := Writer{NoSync: tt.noSync, Syncs: &n}.MkdirAll(tt.path, 0o755)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("MkdirAll(%s) succeeded under a regular file", tt.path)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if info, err := os.Stat(tt.path); err != nil || !info.IsDir() {
				t.Fatalf("%s is not a directory after MkdirAll: %v", tt.path, err)
			}
			if got := n.Load(); got != tt.syncs {
				t.Errorf("directory fsyncs = %d, want %d", got, tt.syncs)
			}
		})
	}
}
