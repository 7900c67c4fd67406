package main

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// unprepared is the fixture as the repository is between releases: every
// sibling at the impossible pseudo-version.
func unprepared() map[string]string {
	files := fixture()
	for _, name := range []string{"b/go.mod", "app/go.mod", "compat/x/go.mod"} {
		files[name] = strings.ReplaceAll(files[name], " v0.1.0", " "+pseudo)
	}
	return files
}

func TestPrepare(t *testing.T) {
	dir := t.TempDir()
	initRepo(t, dir, unprepared())
	r := openRepo(t, dir)
	if len(Check(r)) == 0 {
		t.Fatal("Check passes an unprepared repository")
	}

	changes, err := Prepare(r, "core")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		if strings.HasPrefix(c.Requires, notesFile) {
			continue // TestNotes
		}
		got = append(got, c.String())
	}
	want := []string{
		"app: github.com/dranode/dranode/a " + pseudo + " -> v0.1.0",
		"app: github.com/dranode/dranode/b " + pseudo + " -> v0.1.0",
		"b: github.com/dranode/dranode/a " + pseudo + " -> v0.1.0",
		"compat/x: github.com/dranode/dranode/b " + pseudo + " -> v0.1.0",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// What was written is what the fixture's author would have written.
	for name, content := range fixture() {
		if !strings.HasSuffix(name, "go.mod") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != content {
			t.Errorf("%s after prepare:\n%s\nwant:\n%s", name, data, content)
		}
	}
	r = openRepo(t, dir)
	if p := Check(r); len(p) > 0 {
		t.Errorf("Check after prepare: %s", strings.Join(p, "\n"))
	}
	if again, err := Prepare(r, "core"); err != nil || len(again) != 0 {
		t.Errorf("second Prepare = %v, %v; want no change", again, err)
	}
	if _, err := Prepare(r, "nosuchset"); !errors.Is(err, ErrUnknownSet) {
		t.Errorf("Prepare of an unknown set: %v, want ErrUnknownSet", err)
	}
}

func TestTag(t *testing.T) {
	dir := t.TempDir()
	initRepo(t, dir, unprepared())

	if _, err := Tag(openRepo(t, dir), "core"); !errors.Is(err, ErrNotPrepared) || !strings.Contains(err.Error(), "b/go.mod requires github.com/dranode/dranode/a "+pseudo) {
		t.Fatalf("Tag of an unprepared set: %v, want ErrNotPrepared naming b's requirement", err)
	}
	if _, err := Prepare(openRepo(t, dir), "core"); err != nil {
		t.Fatal(err)
	}
	if _, err := Tag(openRepo(t, dir), "core"); !errors.Is(err, ErrDirtyTree) {
		t.Fatalf("Tag of a dirty tree: %v, want ErrDirtyTree", err)
	}
	commitAll(t, dir, "prepare core v0.1.0")
	if _, err := Tag(openRepo(t, dir), "nosuchset"); !errors.Is(err, ErrUnknownSet) {
		t.Fatalf("Tag of an unknown set: %v, want ErrUnknownSet", err)
	}

	tags, err := Tag(openRepo(t, dir), "core")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a/v0.1.0", "b/v0.1.0"}; !reflect.DeepEqual(tags, want) {
		t.Fatalf("tags %v, want %v (a first: b requires it)", tags, want)
	}
	head := runGit(t, dir, "rev-parse", "HEAD")
	for _, tag := range tags {
		if typ := runGit(t, dir, "cat-file", "-t", tag); typ != "tag" {
			t.Errorf("%s is a %s, want an annotated tag", tag, typ)
		}
		if at := runGit(t, dir, "rev-parse", tag+"^{commit}"); at != head {
			t.Errorf("%s at %s, want HEAD %s", tag, at, head)
		}
	}
	if _, err := Tag(openRepo(t, dir), "core"); !errors.Is(err, ErrTagExists) {
		t.Fatalf("second Tag: %v, want ErrTagExists", err)
	}
}

func TestDependencyOrder(t *testing.T) {
	mod := func(dir string, deps ...string) string {
		s := "module github.com/dranode/dranode/" + dir + "\n\ngo 1.26.0\n"
		for _, d := range deps {
			s += "\nrequire github.com/dranode/dranode/" + d + " v0.1.0\n"
		}
		return s
	}
	tests := []struct {
		name    string
		modules map[string][]string
		want    []string
		wantErr string
	}{
		{"independent: alphabetical", map[string][]string{"b": nil, "a": nil, "c": nil}, []string{"a", "b", "c"}, ""},
		{"chain", map[string][]string{"a": {"b"}, "b": {"c"}, "c": nil}, []string{"c", "b", "a"}, ""},
		{"diamond", map[string][]string{"agent": {"cdi", "claimcache"}, "claimcache": {"checkpoint"}, "cdi": {"checkpoint"}, "checkpoint": nil}, []string{"checkpoint", "cdi", "claimcache", "agent"}, ""},
		{"cycle", map[string][]string{"a": {"b"}, "b": {"a"}}, nil, "cycle: a -> b -> a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{"go.work": "go 1.26.0\n", "versions.yaml": "excluded-modules: []\n"}
			var mods []string
			for m, deps := range tt.modules {
				files[m+"/go.mod"] = mod(m, deps...)
				mods = append(mods, m)
			}
			writeTree(t, dir, files)
			got, err := dependencyOrder(openRepo(t, dir), mods)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, %v; want error %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestAllowsIncompatible(t *testing.T) {
	tests := []struct {
		base, version string
		want          bool
	}{
		{"v0.1.0", "v0.1.0", false},
		{"v0.1.0", "v0.1.1", false},
		{"v0.1.0", "v0.2.0", true},
		{"v0.1.3", "v1.0.0", true},
		{"v1.2.0", "v1.3.0", false},
		{"v1.2.0", "v2.0.0", true},
		{"v0.2.0", "v0.1.0", false},
	}
	for _, tt := range tests {
		if got := allowsIncompatible(tt.base, tt.version); got != tt.want {
			t.Errorf("allowsIncompatible(%s, %s) = %v, want %v", tt.base, tt.version, got, tt.want)
		}
	}
}
