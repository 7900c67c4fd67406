package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestEvictOwnModulesKeepsThirdParty(t *testing.T) {
	dir := t.TempDir()
	paths := map[string]bool{ // path -> evicted
		"github.com/dranode/dranode/cdi@v0.2.0/go.mod":                true,
		"cache/download/github.com/dranode/dranode/cdi/@v/v0.2.0.zip": true,
		"golang.org/x/mod@v0.30.0/go.mod":                             false,
		"cache/download/golang.org/x/mod/@v/v0.30.0.zip":              false,
		"github.com/dranode/other@v1.0.0/go.mod":                      false,
	}
	for p := range paths {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("x"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	// The go command leaves extracted modules read-only.
	if err := os.Chmod(filepath.Join(dir, "github.com/dranode/dranode/cdi@v0.2.0"), 0o555); err != nil {
		t.Fatal(err)
	}
	if err := evictOwnModules(dir); err != nil {
		t.Fatal(err)
	}
	for p, evicted := range paths {
		_, err := os.Stat(filepath.Join(dir, filepath.FromSlash(p)))
		if evicted && err == nil {
			t.Errorf("%s survived the eviction", p)
		}
		if !evicted && err != nil {
			t.Errorf("%s was evicted: %v", p, err)
		}
	}
}
