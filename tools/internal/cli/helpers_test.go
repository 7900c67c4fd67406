package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// result is one dranodectl run.
type result struct {
	code   int
	stdout string
	stderr string
}

// dranodectl runs the CLI in-process exactly as main does.
func dranodectl(t testing.TB, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// mustJSON decodes a run's stdout, which -o json must make valid JSON.
func mustJSON[T any](t testing.TB, r result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("stdout is not the expected JSON: %v\n%s\nstderr: %s", err, r.stdout, r.stderr)
	}
	return v
}

func wantCode(t testing.TB, r result, code int, stderrHas ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	for _, s := range stderrHas {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr does not mention %q:\n%s", s, r.stderr)
		}
	}
}

// copyTree copies a directory of regular files (fixtures are read-only for
// tests that change them).
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if !en.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, en.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, en.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// treeBytes maps every file name in dir to its contents, to prove a refused
// operation changed nothing.
func treeBytes(t testing.TB, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, en := range entries {
		if en.Type().IsRegular() {
			b, err := os.ReadFile(filepath.Join(dir, en.Name()))
			if err != nil {
				t.Fatal(err)
			}
			m[en.Name()] = string(b)
		}
	}
	return m
}
