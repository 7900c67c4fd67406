package main

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// probeModule is the released module whose API the end-to-end test changes;
// probeFile adds to it an exported function of the test's own, so that
// removing it is an incompatible change whatever the module's API is.
const (
	probeModule = "cdi"
	probeFile   = probeModule + "/zz_release_probe.go"
	probeSrc    = "package cdi\n\n// ReleaseProbe is added by the release tool's test.\nfunc ReleaseProbe() {}\n"
)

// cloneHead clones the repository this test runs in, at HEAD, into a
// temporary directory: nothing done there reaches the repository. The
// clone has no tags: the repository's own release tags would make the
// test's release of the same versions refuse to tag. A local clone links
// (or copies) the object files instead of packing every object again, which
// took seconds; git never writes to an object file once made, so the clone
// still cannot reach the repository.
func cloneHead(t *testing.T) string {
	t.Helper()
	root := runGit(t, ".", "rev-parse", "--show-toplevel")
	clone := filepath.Join(t.TempDir(), "repo")
	runGit(t, ".", "clone", "-q", "--local", "--no-tags", root, clone)
	setIdentity(t, clone)
	return clone
}

// setVersion moves the module set of the versions.yaml in dir from one
// version to another.
func setVersion(t *testing.T, dir, from, to string) {
	t.Helper()
	p := filepath.Join(dir, "versions.yaml")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	old := "version: " + from
	if bytes.Count(data, []byte(old)) != 1 {
		t.Fatalf("versions.yaml holds %q %d times, want once:\n%s", old, bytes.Count(data, []byte(old)), data)
	}
	if err := os.WriteFile(p, bytes.Replace(data, []byte(old), []byte("version: "+to), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseFlow releases HEAD on a scratch clone as the README says
// (prepare, commit, tag), builds the proxy from exactly those tags and
// proves the releases work for users; then checks the API against them.
func TestReleaseFlow(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every released module as a user would")
	}
	clone := cloneHead(t)
	writeTree(t, clone, map[string]string{probeFile: probeSrc})
	commitAll(t, clone, "release test: a probe function in "+probeModule)

	r := openRepo(t, clone)
	setName := r.Versions.SetOf(probeModule)
	set, err := r.Versions.Set(setName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(r, setName); err != nil {
		t.Fatal(err)
	}
	for _, m := range set.Modules {
		if notes := readFile(t, clone, m+"/"+notesFile); !strings.Contains(notes, "## "+set.Version+"\n\nFirst release of `"+ModulePath(m)+"`") {
			t.Errorf("%s/%s after prepare:\n%s", m, notesFile, notes)
		}
	}
	if again, err := Prepare(openRepo(t, clone), setName); err != nil || len(again) != 0 {
		t.Errorf("second Prepare = %v, %v; want no change", again, err)
	}
	commitAll(t, clone, "prepare "+setName+" "+set.Version)

	r = openRepo(t, clone)
	tags, err := Tag(r, setName)
	if err != nil {
		t.Fatal(err)
	}
	// Every module of the set is tagged at its version, after the siblings
	// it requires.
	tagged := map[string]bool{}
	for _, tag := range tags {
		dir := strings.TrimSuffix(tag, "/"+set.Version)
		for _, req := range r.Modules[dir].File.Require {
			if sib := r.Sibling(req.Mod.Path); r.Versions.SetOf(sib) == setName && !tagged[sib] {
				t.Errorf("%s tagged before %s, which it requires", tag, sib)
			}
		}
		tagged[dir] = true
	}
	for _, m := range set.Modules {
		if !tagged[m] {
			t.Errorf("module %s of set %s not tagged at %s (tags: %v)", m, setName, set.Version, tags)
		}
	}

	proxy := filepath.Join(t.TempDir(), "proxy")
	held, err := BuildProxy(r, proxy)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != len(set.Modules) {
		t.Errorf("proxy holds %v, want the %d tagged modules", held, len(set.Modules))
	}
	// Each zip holds the root's LICENSE, as the go command's zips of a
	// module in a subdirectory do, and the module's release notes.
	for _, m := range held {
		zr, err := zip.OpenReader(filepath.Join(proxy, m.Path, "@v", m.Version+".zip"))
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]string{}
		for _, f := range zr.File {
			if name := strings.TrimPrefix(f.Name, m.String()+"/"); name == licenceFile || name == notesFile {
				rc, err := f.Open()
				if err != nil {
					t.Fatal(err)
				}
				data, err := io.ReadAll(rc)
				rc.Close()
				if err != nil {
					t.Fatal(err)
				}
				found[name] = string(data)
			}
		}
		zr.Close()
		if found[licenceFile] != readFile(t, clone, licenceFile) {
			t.Errorf("%s's zip: LICENSE %.40q, want the root's", m, found[licenceFile])
		}
		if !strings.Contains(found[notesFile], "## "+m.Version+"\n") {
			t.Errorf("%s's zip: %s %.80q, want its section", m, notesFile, found[notesFile])
		}
	}
	var log bytes.Buffer
	if err := Consumers(r, proxy, []string{"examples/piecemeal-driver"}, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Logf("consumers:\n%s", log.String())

	// The API of the tagged release, changed in the working tree.
	tagCommit := runGit(t, clone, "rev-parse", "HEAD")
	patch := nextPatch(t, set.Version)
	minor := nextMinor(set.Version)
	steps := []struct {
		name    string
		remove  bool   // remove the probe function: incompatible
		add     bool   // add an exported function: compatible
		version string // the set's version in versions.yaml, prepared
		pass    bool
	}{
		{"unchanged at the released version", false, false, set.Version, true},
		{"removal at the released version", true, false, set.Version, false},
		{"removal with a patch bump", true, false, patch, false},
		{"removal with a v0 minor bump", true, false, minor, true},
		{"addition with a patch bump", false, true, patch, true},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			runGit(t, clone, "reset", "-q", "--hard", tagCommit)
			runGit(t, clone, "clean", "-q", "-fdx")
			if s.remove {
				if err := os.Remove(filepath.Join(clone, probeFile)); err != nil {
					t.Fatal(err)
				}
			}
			if s.add {
				writeTree(t, clone, map[string]string{probeModule + "/zz_release_probe2.go": "package cdi\n\n// ReleaseProbe2 is new.\nfunc ReleaseProbe2() {}\n"})
			}
			if s.remove {
				commitAll(t, clone, "release test: remove the probe")
			}
			if s.version != set.Version {
				setVersion(t, clone, set.Version, s.version)
				if _, err := Prepare(openRepo(t, clone), setName); err != nil {
					t.Fatal(err)
				}
				// The notes say what changed: the API as gorelease
				// reports it, and the commit.
				notes := readFile(t, clone, probeModule+"/"+notesFile)
				want := []string{"## " + s.version + "\n\nChanges since " + TagName(probeModule, set.Version) + ".\n", "## " + set.Version + "\n\nFirst release"}
				if s.remove {
					want = append(want, "- ReleaseProbe: removed\n", " release test: remove the probe\n")
				}
				if s.add {
					want = append(want, "- ReleaseProbe2: added\n", "None touched `"+probeModule+"/`")
				}
				for _, w := range want {
					if !strings.Contains(notes, w) {
						t.Errorf("%s/%s lacks %q:\n%s", probeModule, notesFile, w, notes)
					}
				}
			}
			var log bytes.Buffer
			err := APICheck(openRepo(t, clone), []string{probeModule}, "", &log)
			switch {
			case s.pass && err != nil:
				t.Fatalf("apicheck failed: %v\n%s", err, log.String())
			case !s.pass && err == nil:
				t.Fatalf("apicheck passed, want a failure:\n%s", log.String())
			case !s.pass && !strings.Contains(log.String(), "ReleaseProbe: removed"):
				t.Fatalf("apicheck failed without naming the removed function:\n%s", log.String())
			}
			t.Log(strings.TrimSpace(log.String()))
		})
	}
}

// TestConsumersFailOnPseudoVersions releases the repository as it is
// between releases, without prepare (tags made by hand, as a careless
// release would): a module requiring a sibling at the pseudo-version cannot
// be used, and the consumer test says so.
func TestConsumersFailOnPseudoVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds released modules as a user would")
	}
	clone := cloneHead(t)
	// Two modules keep the test fast: checkpoint, and claimcache which
	// requires it.
	writeTree(t, clone, map[string]string{"versions.yaml": "module-sets:\n  s:\n    version: v0.1.0\n    modules: [checkpoint, claimcache]\n"})
	for _, name := range []string{"claimcache/go.mod"} {
		data, err := os.ReadFile(filepath.Join(clone, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "github.com/dranode/dranode/checkpoint "+pseudo) {
			t.Skipf("%s no longer requires checkpoint at %s (prepared already): nothing to prove here", name, pseudo)
		}
	}
	commitAll(t, clone, "release test: a set of two")
	for _, m := range []string{"checkpoint", "claimcache"} {
		runGit(t, clone, "tag", "-a", TagName(m, "v0.1.0"), "-m", "unprepared")
	}
	r := openRepo(t, clone)
	proxy := filepath.Join(t.TempDir(), "proxy")
	if _, err := BuildProxy(r, proxy); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	err := Consumers(r, proxy, nil, &log)
	if err == nil {
		t.Fatalf("consumers passed a release requiring a sibling at %s:\n%s", pseudo, log.String())
	}
	out := log.String()
	if !strings.Contains(out, "FAIL github.com/dranode/dranode/claimcache@v0.1.0 (") || !strings.Contains(out, "github.com/dranode/dranode/checkpoint@"+pseudo) {
		t.Fatalf("want claimcache to fail on checkpoint@%s, got:\n%s", pseudo, out)
	}
	if !strings.Contains(out, "ok   github.com/dranode/dranode/checkpoint@v0.1.0") {
		t.Errorf("checkpoint, which requires no sibling, should pass:\n%s", out)
	}
	t.Logf("as expected:\n%s", out)
}

func nextPatch(t *testing.T, v string) string {
	t.Helper()
	var major, minor, patch int
	if _, err := fmt.Sscanf(v, "v%d.%d.%d", &major, &minor, &patch); err != nil {
		t.Fatalf("version %q: %v", v, err)
	}
	return fmt.Sprintf("v%d.%d.%d", major, minor, patch+1)
}
