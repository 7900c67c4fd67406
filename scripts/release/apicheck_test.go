package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPendingProxyServesWhatTheCheckResolves: the proxy of an API check
// holds the modules checked and the released siblings they require, at
// their tags and, untagged, at the set's version; not the other modules.
func TestPendingProxyServesWhatTheCheckResolves(t *testing.T) {
	dir := t.TempDir()
	files := fixture()
	files["go.work"] = strings.Replace(files["go.work"], "./app\n", "./app\n\t./c\n", 1)
	files["versions.yaml"] = strings.Replace(files["versions.yaml"], "[a, b]", "[a, b, c]", 1)
	files["c/go.mod"] = "module github.com/dranode/dranode/c\n\ngo 1.26.0\n"
	files["c/c.go"] = "// Package c is a fixture.\npackage c\n"
	initRepo(t, dir, files)
	for _, m := range []string{"a", "b", "c"} {
		runGit(t, dir, "tag", "-a", TagName(m, "v0.1.0"), "-m", "release")
	}
	setVersion(t, dir, "v0.1.0", "v0.1.1")
	if _, err := Prepare(openRepo(t, dir), "core"); err != nil {
		t.Fatal(err)
	}

	proxy := filepath.Join(t.TempDir(), "proxy")
	if err := buildPendingProxy(openRepo(t, dir), proxy, []string{"b"}); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]bool{
		"a/@v/v0.1.0.zip": true, "a/@v/v0.1.1.zip": true, "a/@v/list": true,
		"b/@v/v0.1.0.zip": true, "b/@v/v0.1.1.zip": true, "b/@v/list": true,
		"c": false,
	} {
		_, err := os.Stat(filepath.Join(proxy, filepath.FromSlash(pathPrefix+file)))
		if got := err == nil; got != want {
			t.Errorf("proxy holds %s: %v, want %v", file, got, want)
		}
	}
	// The untagged version is served when asked for by name, not listed.
	list, err := os.ReadFile(filepath.Join(proxy, filepath.FromSlash(pathPrefix+"a/@v/list")))
	if err != nil {
		t.Fatal(err)
	}
	if string(list) != "v0.1.0\n" {
		t.Errorf("a/@v/list = %q, want the tag only", list)
	}
}
