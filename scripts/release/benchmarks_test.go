package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// measuredAt matches the commit a BENCHMARKS.md names for its figures, e.g.
// "Measured at commit abc1234" or "commit `abc1234`".
var measuredAt = regexp.MustCompile("(?i)\\bcommit[ `]+[0-9a-f]{7,40}\\b")

// benchmarksNameACommit reports, for every BENCHMARKS.md in the module
// directories dirs under root, whether it is missing a commit: figures
// without the commit they were measured at cannot be reproduced or dated.
func benchmarksNameACommit(root string, dirs []string) []string {
	var bad []string
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(d), "BENCHMARKS.md"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			bad = append(bad, d+"/BENCHMARKS.md: "+err.Error())
			continue
		}
		if !measuredAt.Match(data) {
			bad = append(bad, d+"/BENCHMARKS.md names no commit (add e.g. \"Measured at commit abc1234\" next to the figures)")
		}
	}
	return bad
}

// TestBenchmarksNameACommit checks the repository: every BENCHMARKS.md of a
// released module or of tools/... names the commit its figures come from.
func TestBenchmarksNameACommit(t *testing.T) {
	root := filepath.Join("..", "..")
	v, err := LoadVersions(filepath.Join(root, "versions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for d := range v.Released() {
		dirs = append(dirs, d)
	}
	for _, d := range v.Excluded {
		if d == "tools" || strings.HasPrefix(d, "tools/") {
			dirs = append(dirs, d)
		}
	}
	slices.Sort(dirs)
	if !slices.Contains(dirs, "checkpoint") || !slices.Contains(dirs, "tools") {
		t.Fatalf("module list %v lacks checkpoint or tools: versions.yaml not read as expected", dirs)
	}
	for _, msg := range benchmarksNameACommit(root, dirs) {
		t.Error(msg)
	}
}

func TestBenchmarksNameACommitCases(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		ok            bool
	}{
		{"measured at", "# x\n\nMeasured at commit abc1234, go1.26.8.\n\n| a | 1 ms |\n", true},
		{"backquoted full hash", "figures: commit `0123456789abcdef0123456789abcdef01234567`\n", true},
		{"no commit", "# x\n\n2026-11-21, load 2.\n\n| a | 1 ms |\n", false},
		{"word without hash", "# x\n\nthe commit floor is 0.2 ms\n", false},
		{"hash too short", "commit abc12\n", false},
		{"not hex", "commit abcdefg\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, map[string]string{"m/BENCHMARKS.md": tc.content})
			bad := benchmarksNameACommit(root, []string{"m", "nobench"})
			if ok := len(bad) == 0; ok != tc.ok {
				t.Errorf("ok = %v, want %v (%v)", ok, tc.ok, bad)
			}
		})
	}
}
