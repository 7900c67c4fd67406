package cli

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dranode/dranode/cdi"
	"github.com/dranode/dranode/claimcache"
)

func TestCDIParse(t *testing.T) {
	tests := []struct {
		name    string
		code    int
		want    cdiName
		errText string
	}{
		{name: "gpu.example.com/gpu=0", want: cdiName{Vendor: "gpu.example.com", Class: "gpu", Device: "0", Kind: "gpu.example.com/gpu"}},
		{name: "example.com/nic=rdma-common", want: cdiName{Vendor: "example.com", Class: "nic", Device: "rdma-common", Kind: "example.com/nic"}},
		{name: "gpu.example.com/gpu=0/1", code: 1, errText: "device name"},
		{name: "gpu.example.com=0", code: 1, errText: "cdi parse"},
		{name: "", code: 1, errText: "cdi parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := dranodectl(t, "cdi", "parse", tt.name, "-o", "json")
			wantCode(t, r, tt.code, tt.errText)
			if tt.code != 0 {
				// The message is the library's: it names what is wrong.
				_, _, _, err := cdi.ParseQualifiedName(tt.name)
				if err == nil || !strings.Contains(r.stderr, err.Error()) {
					t.Errorf("stderr %q does not carry the parser's error %v", r.stderr, err)
				}
				return
			}
			got := mustJSON[cdiName](t, r)
			tt.want.Name = tt.name
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func gpuSpec(devices ...string) *cdi.Spec {
	s := &cdi.Spec{Version: cdi.CurrentVersion, Kind: "example.com/gpu"}
	for _, d := range devices {
		s.Devices = append(s.Devices, cdi.Device{Name: d, ContainerEdits: cdi.ContainerEdits{
			Env:         []string{"GPU=" + d},
			DeviceNodes: []cdi.DeviceNode{{Path: "/dev/sim-" + d}},
		}})
	}
	return s
}

// An invalid spec with three problems, as a broken driver might leave one.
const brokenSpec = `{
  "cdiVersion": "1.1.0",
  "kind": "example.com/gpu",
  "devices": [
    {"name": "bad/name", "containerEdits": {"env": ["=novalue"]}},
    {"name": "ok", "containerEdits": {"deviceNodes": [{"path": "/dev/x", "type": "z"}]}}
  ]
}`

func TestCDIValidate(t *testing.T) {
	dir := t.TempDir()
	specs := cdi.SpecDir{Path: dir}
	good1, err := specs.Write(gpuSpec("claim-1-gpu-0"), "uid-1")
	if err != nil {
		t.Fatal(err)
	}
	good2, err := specs.Write(gpuSpec("claim-2-gpu-0", "claim-2-gpu-1"), "uid-2")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("valid directory", func(t *testing.T) {
		r := dranodectl(t, "cdi", "validate", dir, "-o", "json")
		wantCode(t, r, 0)
		rep := mustJSON[validateReport](t, r)
		if rep.Invalid != 0 || len(rep.Specs) != 2 {
			t.Fatalf("report %+v", rep)
		}
		files := []string{rep.Specs[0].File, rep.Specs[1].File}
		if !slices.Equal(files, []string{good1, good2}) {
			t.Errorf("validated %v, want %v", files, []string{good1, good2})
		}
		if !slices.Equal(rep.Specs[1].Devices, []string{"claim-2-gpu-0", "claim-2-gpu-1"}) {
			t.Errorf("devices %v", rep.Specs[1].Devices)
		}
	})

	bad := filepath.Join(dir, "broken.json")
	if err := os.WriteFile(bad, []byte(brokenSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	unknownField := filepath.Join(dir, "typo.json")
	if err := os.WriteFile(unknownField, []byte(`{"cdiVersion":"1.1.0","kind":"example.com/gpu","devicez":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A YAML spec redefining a device of another spec: runtimes refuse that.
	dup := filepath.Join(dir, "zz-dup.yaml")
	if err := os.WriteFile(dup, []byte("cdiVersion: 1.1.0\nkind: example.com/gpu\ndevices:\n- name: claim-1-gpu-0\n  containerEdits:\n    env: [A=1]\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("every problem of every spec", func(t *testing.T) {
		r := dranodectl(t, "cdi", "validate", dir, "-o", "json")
		wantCode(t, r, 1, "3 of 5 spec(s) invalid")
		rep := mustJSON[validateReport](t, r)
		byFile := map[string]specResult{}
		for _, s := range rep.Specs {
			byFile[s.File] = s
		}
		// The problems listed are exactly the library's, all of them.
		spec, err := cdi.DecodeSpec([]byte(brokenSpec))
		if err != nil {
			t.Fatal(err)
		}
		var se *cdi.SpecError
		if !errors.As(spec.Validate(), &se) || len(se.Problems) < 3 {
			t.Fatalf("fixture should have at least 3 problems, Validate says %v", se)
		}
		if got := byFile[bad].Problems; len(got) != len(se.Problems) {
			t.Errorf("broken.json: %d problems listed %v, library finds %d", len(got), got, len(se.Problems))
		}
		if got := byFile[unknownField].Problems; len(got) != 1 || !strings.Contains(got[0], "devicez") {
			t.Errorf("typo.json: %v, want the unknown field named", got)
		}
		if got := byFile[dup].Problems; len(got) != 1 || !strings.Contains(got[0], good1) {
			t.Errorf("zz-dup.yaml: %v, want the duplicate device and the file defining it first", got)
		}
		if !byFile[good1].Valid || !byFile[good2].Valid {
			t.Error("valid specs reported invalid")
		}
		// The table lists every problem as well.
		tr := dranodectl(t, "cdi", "validate", dir)
		for _, p := range byFile[bad].Problems {
			if !strings.Contains(tr.stdout, p) {
				t.Errorf("table does not list %q", p)
			}
		}
	})

	t.Run("single file", func(t *testing.T) {
		wantCode(t, dranodectl(t, "cdi", "validate", good1), 0)
		wantCode(t, dranodectl(t, "cdi", "validate", bad), 1, "1 of 1 spec(s) invalid")
	})

	t.Run("missing path", func(t *testing.T) {
		wantCode(t, dranodectl(t, "cdi", "validate", filepath.Join(dir, "nope")), 1, "no such file")
	})
}

func TestCDISweep(t *testing.T) {
	dir := t.TempDir()
	gpus := cdi.SpecDir{Path: dir}
	var paths = map[string]string{}
	for _, uid := range []string{"uid-keep", "uid-gone-1", "uid-gone-2"} {
		p, err := gpus.Write(gpuSpec("claim-"+uid), uid)
		if err != nil {
			t.Fatal(err)
		}
		paths[uid] = p
	}
	nic := &cdi.Spec{Version: cdi.CurrentVersion, Kind: "example.com/nic", Devices: []cdi.Device{{Name: "eth1", ContainerEdits: cdi.ContainerEdits{Env: []string{"NIC=1"}}}}}
	nicPath, err := gpus.Write(nic, "uid-nic")
	if err != nil {
		t.Fatal(err)
	}
	before := treeBytes(t, dir)

	dry := dranodectl(t, "cdi", "sweep", "--dir", dir, "--kind", "example.com/gpu", "--keep", "uid-keep", "--ignore-record", "-o", "json")
	wantCode(t, dry, 0)
	dryRep := mustJSON[sweepReport](t, dry)
	want := []string{paths["uid-gone-1"], paths["uid-gone-2"]}
	slices.Sort(want)
	if !dryRep.DryRun || !slices.Equal(dryRep.Removed, want) {
		t.Fatalf("dry run: %+v, want %v", dryRep, want)
	}
	if got := treeBytes(t, dir); len(got) != len(before) {
		t.Fatal("a dry run removed files")
	}

	applied := dranodectl(t, "cdi", "sweep", "--dir", dir, "--kind", "example.com/gpu", "--keep", "uid-keep", "--ignore-record", "--yes", "-o", "json")
	wantCode(t, applied, 0)
	appRep := mustJSON[sweepReport](t, applied)
	if appRep.DryRun || !slices.Equal(appRep.Removed, dryRep.Removed) {
		t.Fatalf("--yes removed %v, the dry run announced %v", appRep.Removed, dryRep.Removed)
	}
	for _, keep := range []string{paths["uid-keep"], nicPath} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s should be kept: %v", keep, err)
		}
	}
	for _, gone := range want {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("%s should be gone: %v", gone, err)
		}
	}

	t.Run("bad flags", func(t *testing.T) {
		wantCode(t, dranodectl(t, "cdi", "sweep", "--dir", dir), 2, "--driver (or --kind) is required")
		wantCode(t, dranodectl(t, "cdi", "sweep", "--dir", dir, "--driver", "a.com", "--kind", "a.com/b"), 2, "not both")
		wantCode(t, dranodectl(t, "cdi", "sweep", "--dir", dir, "--kind", "gpu.example.com"), 1, `kind "gpu.example.com"`)
		wantCode(t, dranodectl(t, "cdi", "sweep", "--dir", dir, "--driver", "exa mple.com"), 1, `kind "exa mple.com/claim"`)
		wantCode(t, dranodectl(t, "cdi", "sweep", "--dir", dir, "--driver", "a.com", "--record", dir, "--ignore-record"), 2, "not both")
		missing := filepath.Join(dir, "no-record")
		wantCode(t, dranodectl(t, "cdi", "sweep", "--dir", dir, "--driver", "a.com", "--record", missing), 1,
			"the agent's record "+missing, "--ignore-record")
	})
}

// TestCDISweepKeepsRecordedClaims: without --keep, a claim the agent's
// record holds, prepared or still preparing, keeps its spec; the record is
// read from a copy and left as it was.
func TestCDISweepKeepsRecordedClaims(t *testing.T) {
	dir, record := t.TempDir(), filepath.Join(t.TempDir(), "claims.record")
	specs := cdi.SpecDir{Path: dir}
	paths := map[string]string{}
	for _, uid := range []string{"uid-prepared", "uid-preparing", "uid-gone"} {
		p, err := specs.Write(gpuSpec("claim-"+uid), uid)
		if err != nil {
			t.Fatal(err)
		}
		paths[uid] = p
	}
	cache, _, err := claimcache.Open(record, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"uid-prepared", "uid-preparing"} {
		if _, err := cache.StartPrepare(claimcache.ClaimRef{Namespace: "ns", Name: "c-" + uid, UID: uid}, "pod-1"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cache.FinishPrepare("uid-prepared", map[string][]claimcache.Device{"example.com": {{Pool: "p", Device: "gpu0", CDIDeviceIDs: []string{"example.com/gpu=gpu0"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := cache.Close(); err != nil {
		t.Fatal(err)
	}
	recordBefore := treeBytes(t, record)

	r := dranodectl(t, "cdi", "sweep", "--dir", dir, "--kind", "example.com/gpu", "--record", record, "--yes", "-o", "json")
	wantCode(t, r, 0)
	rep := mustJSON[sweepReport](t, r)
	if !slices.Equal(rep.Removed, []string{paths["uid-gone"]}) || !slices.Equal(rep.Recorded, []string{"uid-prepared", "uid-preparing"}) {
		t.Errorf("sweep: removed %v, recorded %v; want only %s removed, both recorded claims kept", rep.Removed, rep.Recorded, paths["uid-gone"])
	}
	for _, uid := range []string{"uid-prepared", "uid-preparing"} {
		if _, err := os.Stat(paths[uid]); err != nil {
			t.Errorf("the spec of recorded claim %s: %v", uid, err)
		}
	}
	if after := treeBytes(t, record); len(after) != len(recordBefore) {
		t.Errorf("the record changed: %d files before, %d after", len(recordBefore), len(after))
	} else {
		for f, b := range recordBefore {
			if string(after[f]) != string(b) {
				t.Errorf("the record's %s changed", f)
			}
		}
	}
}
