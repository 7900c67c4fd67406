package cdi

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func claimSpec(kind, claimUID string) *Spec {
	return &Spec{
		Version: "0.5.0",
		Kind:    kind,
		Devices: []Device{{
			Name: claimUID + "-gpu-0",
			ContainerEdits: ContainerEdits{
				Env:         []string{"GPU=0"},
				DeviceNodes: []DeviceNode{{Path: "/dev/null", Type: "c", Major: 1, Minor: 3}},
			},
		}},
	}
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestSpecDirWriteRemove(t *testing.T) {
	d := SpecDir{Path: filepath.Join(t.TempDir(), "cdi")} // Write creates it
	spec := claimSpec("gpu.example.com/claim", testClaimUID)
	path, err := d.Write(spec, testClaimUID)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(d.Path, "gpu.example.com-claim_"+testClaimUID+".json"); path != want {
		t.Fatalf("wrote %s, want %s", path, want)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != SpecFileMode {
		t.Errorf("mode %v, want %v", info.Mode().Perm(), SpecFileMode)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeSpec(data)
	if err != nil {
		t.Fatal(err)
	}
	if back.Devices[0].Name != spec.Devices[0].Name || back.Devices[0].ContainerEdits.DeviceNodes[0].Major != 1 {
		t.Errorf("read back %+v", back)
	}

	// Rewriting replaces the file and leaves no temporary files behind.
	spec.Devices[0].ContainerEdits.Env = []string{"GPU=1"}
	if _, err := d.Write(spec, testClaimUID); err != nil {
		t.Fatal(err)
	}
	if names := listDir(t, d.Path); len(names) != 1 {
		t.Errorf("directory holds %q, want just the spec", names)
	}
	data, _ = os.ReadFile(path)
	if back, _ := DecodeSpec(data); back == nil || back.Devices[0].ContainerEdits.Env[0] != "GPU=1" {
		t.Errorf("rewrite not visible: %s", data)
	}

	if err := d.Remove("gpu.example.com", "claim", testClaimUID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("spec still there after Remove: %v", err)
	}
	if err := d.Remove("gpu.example.com", "claim", testClaimUID); err != nil {
		t.Errorf("removing a missing spec: %v", err)
	}
	if err := (SpecDir{Path: filepath.Join(d.Path, "nope")}).Remove("a", "b", "c"); err != nil {
		t.Errorf("removing from a missing directory: %v", err)
	}
}

// Durable (the zero value) syncs the spec and the directory on Write (and
// the parent of the directory when Write creates it) and the directory on
// Remove and Sweep; NoSync syncs nothing and still
// replaces specs whole, with no temporary file left behind.
func TestSpecDirNoSync(t *testing.T) {
	for _, tc := range []struct {
		name                           string
		noSync                         bool
		wantWrite, wantRemove, wantSwp uint64
		wantMkdir                      uint64 // extra, on the Write that creates the directory
	}{
		{name: "durable", wantWrite: 2, wantRemove: 1, wantSwp: 1, wantMkdir: 1},
		{name: "no-sync", noSync: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := SpecDir{Path: filepath.Join(t.TempDir(), "cdi"), NoSync: tc.noSync}
			spec := claimSpec("gpu.example.com/claim", testClaimUID)
			counted := func(what string, want uint64, f func() error) {
				t.Helper()
				before := fsyncs.Load()
				if err := f(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if got := fsyncs.Load() - before; got != want {
					t.Errorf("%s: %d fsyncs, want %d", what, got, want)
				}
			}
			for i, env := range []string{"GPU=0", "GPU=1"} {
				spec.Devices[0].ContainerEdits.Env = []string{env}
				want := tc.wantWrite
				if i == 0 {
					want += tc.wantMkdir
				}
				counted("Write "+env, want, func() error { _, err := d.Write(spec, testClaimUID); return err })
				data, err := os.ReadFile(filepath.Join(d.Path, TransientSpecFileName("gpu.example.com", "claim", testClaimUID)))
				if err != nil {
					t.Fatal(err)
				}
				if back, err := DecodeSpec(data); err != nil || back.Devices[0].ContainerEdits.Env[0] != env {
					t.Errorf("after writing %s read back %s (%v)", env, data, err)
				}
				if names := listDir(t, d.Path); len(names) != 1 {
					t.Errorf("directory holds %q, want just the spec", names)
				}
			}
			counted("Remove", tc.wantRemove, func() error { return d.Remove("gpu.example.com", "claim", testClaimUID) })
			if names := listDir(t, d.Path); len(names) != 0 {
				t.Errorf("directory holds %q after Remove", names)
			}
			if _, err := d.Write(spec, testClaimUID); err != nil {
				t.Fatal(err)
			}
			counted("Sweep", tc.wantSwp, func() error {
				removed, err := d.Sweep("gpu.example.com", "claim", func(string) bool { return false })
				if len(removed) != 1 {
					t.Errorf("Sweep removed %q, want the one spec", removed)
				}
				return err
			})
		})
	}
}

func TestSpecDirWriteRejects(t *testing.T) {
	d := SpecDir{Path: t.TempDir()}
	bad := claimSpec("gpu.example.com/claim", testClaimUID)
	bad.Devices[0].ContainerEdits.DeviceNodes[0].Type = "x"
	if _, err := d.Write(bad, testClaimUID); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("invalid spec: got %v", err)
	}
	good := claimSpec("gpu.example.com/claim", testClaimUID)
	for _, uid := range []string{"", "a\x00b"} {
		if _, err := d.Write(good, uid); !errors.Is(err, ErrInvalidClaimUID) {
			t.Errorf("claim UID %q: got %v", uid, err)
		}
		if err := d.Remove("gpu.example.com", "claim", uid); !errors.Is(err, ErrInvalidClaimUID) {
			t.Errorf("Remove with claim UID %q: got %v", uid, err)
		}
	}
	if names := listDir(t, d.Path); len(names) != 0 {
		t.Errorf("rejected writes left %q", names)
	}
	// Vendor and class must be names, so that Remove and Sweep cannot
	// reach outside the directory.
	outside := filepath.Join(filepath.Dir(d.Path), "victim-x_1.json")
	if err := os.WriteFile(outside, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, vc := range [][2]string{{"../victim", "x"}, {"a", "../b"}, {"", "x"}, {"a", ""}} {
		if err := d.Remove(vc[0], vc[1], "1"); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Remove(%q, %q): got %v, want a name error", vc[0], vc[1], err)
		}
		if _, err := d.Sweep(vc[0], vc[1], func(string) bool { return false }); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Sweep(%q, %q): got %v, want a name error", vc[0], vc[1], err)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("file outside the directory touched: %v", err)
	}
	// A directory path that is a file: every operation says so.
	file := filepath.Join(d.Path, "not-a-dir")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	blocked := SpecDir{Path: file}
	if _, err := blocked.Write(good, "1"); err == nil || !strings.Contains(err.Error(), "not-a-dir") {
		t.Errorf("Write into a file: %v", err)
	}
	if err := blocked.Remove("a", "b", "1"); err == nil {
		t.Errorf("Remove in a file: no error")
	}
	if _, err := blocked.Sweep("a", "b", func(string) bool { return false }); err == nil {
		t.Errorf("Sweep of a file: no error")
	}
	if _, err := d.Sweep("a", "b", nil); err == nil {
		t.Errorf("Sweep with a nil keep function must refuse")
	}
	// A "/" in the claim UID cannot escape the directory.
	path, err := d.Write(good, "../x")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(path) != d.Path {
		t.Errorf("wrote %s outside %s", path, d.Path)
	}
}

func TestSpecDirSweep(t *testing.T) {
	d := SpecDir{Path: t.TempDir()}
	write := func(kind, uid string) string {
		t.Helper()
		path, err := d.Write(claimSpec(kind, uid), uid)
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	const vendor, class = "example.com", "gpu-claim"
	const prefix = vendor + "-" + class + "_"
	leaked1 := write("example.com/gpu-claim", "leaked-1")
	leaked2 := write("example.com/gpu-claim", "leaked-2")
	kept := write("example.com/gpu-claim", "kept")
	otherClass := write("example.com/gpu", "leaked-3")
	otherVendor := write("nic.example.com/gpu-claim", "leaked-4")
	// Vendor "example.com-gpu", class "claim": the same file-name prefix.
	lookalike := write("example.com-gpu/claim", "zz")
	if !strings.HasPrefix(filepath.Base(lookalike), prefix) {
		t.Fatalf("test setup: %s does not share the prefix %s", lookalike, prefix)
	}
	garbage := filepath.Join(d.Path, prefix+"garbage.json")
	tmp := filepath.Join(d.Path, "."+prefix+"leaked-5.json.tmp-123")
	static := filepath.Join(d.Path, vendor+"-"+class+".json")
	for _, p := range []string{garbage, tmp, static} {
		if err := os.WriteFile(p, []byte("{not json"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	keep := func(uid string) bool { return uid == "kept" }
	removed, err := d.Sweep(vendor, class, keep)
	if want := []string{leaked1, leaked2}; !slices.Equal(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	if err == nil || !strings.Contains(err.Error(), garbage) {
		t.Errorf("want an error naming the unreadable %s, got %v", garbage, err)
	}
	for _, p := range []string{kept, otherClass, otherVendor, lookalike, garbage, tmp, static} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s should still exist: %v", filepath.Base(p), err)
		}
	}
	// A second sweep finds nothing more to remove.
	if again, _ := d.Sweep(vendor, class, keep); len(again) != 0 {
		t.Errorf("second sweep removed %q", again)
	}
	// A missing directory has nothing to sweep.
	if r, err := (SpecDir{Path: filepath.Join(d.Path, "missing")}).Sweep("a", "b", keep); r != nil || err != nil {
		t.Errorf("missing directory: %v, %v", r, err)
	}
}

// Sweep and Remove racing on the same files: every file ends up removed
// exactly once between them, and neither reports the other's work as an
// error.
func TestSpecDirSweepConcurrentRemove(t *testing.T) {
	d := SpecDir{Path: t.TempDir()}
	const n = 50
	var uids []string
	for i := range n {
		uid := "claim-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		uids = append(uids, uid)
		if _, err := d.Write(claimSpec("gpu.example.com/claim", uid), uid); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var removeErr error
	wg.Go(func() {
		for _, uid := range uids {
			if err := d.Remove("gpu.example.com", "claim", uid); err != nil {
				removeErr = err
			}
		}
	})
	removed, err := d.Sweep("gpu.example.com", "claim", func(string) bool { return false })
	wg.Wait()
	if err != nil || removeErr != nil {
		t.Fatalf("sweep: %v; remove: %v", err, removeErr)
	}
	if len(removed) > n {
		t.Errorf("sweep removed %d of %d files", len(removed), n)
	}
	if names := listDir(t, d.Path); len(names) != 0 {
		t.Errorf("left %q", names)
	}
}

func TestSpecDirLookup(t *testing.T) {
	root := t.TempDir()
	d := SpecDir{Path: filepath.Join(root, "cdi")}
	if _, err := d.Write(claimSpec("gpu.example.com/"+ClaimClass, testClaimUID), testClaimUID); err != nil {
		t.Fatal(err)
	}
	specPath := filepath.Join(d.Path, "gpu.example.com-claim_"+testClaimUID+".json")
	if err := os.Mkdir(filepath.Join(d.Path, "gpu.example.com-claim_dir.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name               string
		dir                SpecDir
		vendor, class, uid string
		wantPath           string // "" for an invalid part
		wantExists         bool
		wantErr            error // matched with errors.Is; nil: any error named by errText
		errText            string
	}{
		{name: "written", dir: d, vendor: "gpu.example.com", class: ClaimClass, uid: testClaimUID, wantPath: specPath, wantExists: true},
		{name: "other claim", dir: d, vendor: "gpu.example.com", class: ClaimClass, uid: "other", wantPath: filepath.Join(d.Path, "gpu.example.com-claim_other.json")},
		{name: "other class", dir: d, vendor: "gpu.example.com", class: "gpu", uid: testClaimUID, wantPath: filepath.Join(d.Path, "gpu.example.com-gpu_"+testClaimUID+".json")},
		{name: "slash in UID", dir: d, vendor: "gpu.example.com", class: ClaimClass, uid: "a/b", wantPath: filepath.Join(d.Path, "gpu.example.com-claim_a_b.json")},
		{name: "missing directory", dir: SpecDir{Path: filepath.Join(root, "none")}, vendor: "v", class: "c", uid: "u", wantPath: filepath.Join(root, "none", "v-c_u.json")},
		{name: "a directory, not a spec", dir: d, vendor: "gpu.example.com", class: ClaimClass, uid: "dir", wantPath: filepath.Join(d.Path, "gpu.example.com-claim_dir.json"), errText: "not a regular file"},
		{name: "directory path is a file", dir: SpecDir{Path: file}, vendor: "v", class: "c", uid: "u", wantPath: filepath.Join(file, "v-c_u.json"), errText: "not a directory"},
		{name: "empty UID", dir: d, vendor: "v", class: "c", uid: "", wantErr: ErrInvalidClaimUID},
		{name: "NUL in UID", dir: d, vendor: "v", class: "c", uid: "a\x00", wantErr: ErrInvalidClaimUID},
		{name: "vendor escapes", dir: d, vendor: "../v", class: "c", uid: "u", wantErr: ErrInvalidName},
		{name: "empty class", dir: d, vendor: "v", class: "", uid: "u", wantErr: ErrInvalidName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, exists, err := tc.dir.Lookup(tc.vendor, tc.class, tc.uid)
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("error %v, want %v", err, tc.wantErr)
				}
			case tc.errText != "":
				if err == nil || !strings.Contains(err.Error(), tc.errText) {
					t.Errorf("error %v, want one saying %q", err, tc.errText)
				}
			case err != nil:
				t.Errorf("unexpected error %v", err)
			}
			if path != tc.wantPath || exists != tc.wantExists {
				t.Errorf("Lookup = %q, %v; want %q, %v", path, exists, tc.wantPath, tc.wantExists)
			}
		})
	}
	// Lookup follows Remove.
	if err := d.Remove("gpu.example.com", ClaimClass, testClaimUID); err != nil {
		t.Fatal(err)
	}
	if _, exists, err := d.Lookup("gpu.example.com", ClaimClass, testClaimUID); exists || err != nil {
		t.Errorf("after Remove: exists %v, error %v", exists, err)
	}
}
