package cdiref

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dranode/dranode/cdi"
	refcdi "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

func goldenFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../cdi/testdata/specs/*.json")
	if err != nil || len(files) < 8 {
		t.Fatalf("golden specs: %v, %v", files, err)
	}
	return files
}

// toReference converts through JSON, the only way the two meet in practice.
func toReference(t *testing.T, s *cdi.Spec) *specs.Spec {
	t.Helper()
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var r specs.Spec
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("reference cannot decode our JSON: %v\n%s", err, data)
	}
	return &r
}

// Each golden spec (one per version 0.3.0 to 1.1.0) decodes to equal values
// whichever side wrote the JSON.
func TestSpecJSONBothWays(t *testing.T) {
	for _, file := range goldenFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			ours, err := cdi.DecodeSpec(data)
			if err != nil {
				t.Fatal(err)
			}
			var ref specs.Spec
			if err := json.Unmarshal(data, &ref); err != nil {
				t.Fatal(err)
			}
			// ours -> JSON -> reference equals file -> reference.
			if got := toReference(t, ours); !reflect.DeepEqual(*got, ref) {
				t.Errorf("reference sees our JSON differently:\n got %+v\nwant %+v", *got, ref)
			}
			// reference -> JSON -> ours equals file -> ours.
			refJSON, err := json.Marshal(&ref)
			if err != nil {
				t.Fatal(err)
			}
			back, err := cdi.DecodeSpec(refJSON)
			if err != nil {
				t.Fatalf("we cannot decode the reference's JSON: %v\n%s", err, refJSON)
			}
			if !reflect.DeepEqual(back, ours) {
				t.Errorf("we see the reference's JSON differently:\n got %+v\nwant %+v", back, ours)
			}
			// And the reference library loads the golden file as a spec.
			if _, err := refcdi.ReadSpec(file, 0); err != nil {
				t.Errorf("reference rejects golden spec: %v", err)
			}
		})
	}
}

// pick returns a random element; generated specs draw every field from
// pools that mix valid and invalid values so that both outcomes, and every
// rule, are exercised.
func pick[T any](r *rand.Rand, pool ...T) T { return pool[r.IntN(len(pool))] }

// mostly returns valid five times in six, so that generated specs are valid
// often enough to test acceptance too.
func mostly[T any](r *rand.Rand, valid T, invalid ...T) T {
	if r.IntN(6) > 0 {
		return valid
	}
	return pick(r, invalid...)
}

func randomEnv(r *rand.Rand) []string {
	var env []string
	for range r.IntN(3) {
		env = append(env, mostly(r, pick(r, "A=1", "B=", "D=x=y"), "=1", "C", ""))
	}
	return env
}

func randomEdits(r *rand.Rand) cdi.ContainerEdits {
	var e cdi.ContainerEdits
	if r.IntN(3) == 0 {
		e.Env = randomEnv(r)
	}
	if r.IntN(3) == 0 {
		for range 1 + r.IntN(2) {
			e.DeviceNodes = append(e.DeviceNodes, cdi.DeviceNode{
				Path:        mostly(r, pick(r, "/dev/null", "/dev/x"), ""),
				HostPath:    pick(r, "", "", "/dev/host"),
				Type:        mostly(r, pick(r, "", "b", "c", "u", "p"), "x", "C"),
				Major:       pick[int64](r, 0, 1),
				Permissions: mostly(r, pick(r, "", "rwm", "r", "none", "mm"), "rwx", "None"),
			})
		}
	}
	if r.IntN(4) == 0 {
		e.Hooks = append(e.Hooks, cdi.Hook{
			HookName: mostly(r, pick(r, cdi.HookNames()...), "preStart", ""),
			Path:     mostly(r, "/bin/true", ""),
			Env:      randomEnv(r),
		})
	}
	if r.IntN(4) == 0 {
		e.Mounts = append(e.Mounts, cdi.Mount{
			HostPath:      mostly(r, "/src", ""),
			ContainerPath: mostly(r, "/dst", ""),
			Type:          pick(r, "", "", "tmpfs"),
		})
	}
	if r.IntN(6) == 0 {
		rdt := &cdi.IntelRdt{ClosID: mostly(r, pick(r, "", "/", "clos"), ".", "..", "a/b", "a\nb")}
		if r.IntN(3) == 0 {
			rdt.Schemata = []string{"L3:0=f"}
		}
		rdt.EnableMonitoring = r.IntN(4) == 0
		e.IntelRdt = rdt
	}
	if r.IntN(6) == 0 {
		e.AdditionalGIDs = []uint32{44}
	}
	if r.IntN(6) == 0 {
		for range 1 + r.IntN(3) {
			e.NetDevices = append(e.NetDevices, cdi.NetDevice{
				HostInterfaceName: pick(r, "eth0", "eth1", ""),
				Name:              pick(r, "net0", "net1", ""),
			})
		}
	}
	return e
}

func randomSpec(r *rand.Rand) *cdi.Spec {
	s := &cdi.Spec{
		Version: mostly(r, pick(r, "0.3.0", "0.4.0", "0.5.0", "0.6.0", "v0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0", "v1.1.0"),
			"0.1.0", "0.2.0", "1.2.0", "", "1.1"),
		Kind: mostly(r, pick(r, "vendor.com/gpu", "a/b", "vendor.com/gpu.mig"),
			"vendor.com", "/gpu", "vendor.com/", "1v/gpu", "vendor.com/gpu/x", "vendor.com/gpu-", "vé/gpu"),
	}
	if r.IntN(8) == 0 {
		s.Annotations = map[string]string{pick(r, "a", "Not Valid!"): "x"}
	}
	if r.IntN(3) == 0 {
		s.ContainerEdits = randomEdits(r)
	}
	for range mostly(r, 1+r.IntN(3), 0) {
		d := cdi.Device{
			Name:           mostly(r, pick(r, "gpu0", "gpu1", "gpu2", "0", "a:b"), "", "-x", "x.", "gpu0"),
			ContainerEdits: randomEdits(r),
		}
		if r.IntN(8) == 0 {
			d.Annotations = map[string]string{"k": "v"}
		}
		s.Devices = append(s.Devices, d)
	}
	if r.IntN(2) == 0 { // what a careful writer does
		s.Version = cdi.MinimumVersion(s)
	}
	return s
}

// Thousands of generated specs: our Validate fails exactly when the
// reference refuses to load the spec from a file, and MinimumVersion agrees
// with the reference's MinimumRequiredVersion, except where the
// reference's loop-variable bug (see withReferenceBlindSpot) makes it
// return too old a version.
func TestSpecValidationDifferential(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	path := filepath.Join(dir, "spec.json")
	const n = 5000
	valid, blindSpot := 0, 0
	for i := range n {
		s := randomSpec(r)
		data, err := s.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		refMin, err := specs.MinimumRequiredVersion(toReference(t, s))
		if err != nil {
			t.Fatal(err)
		}
		ourMin := cdi.MinimumVersion(s)
		if ourMin != refMin {
			// Allowed only when the blind spot explains it exactly.
			if got := cdi.MinimumVersion(withReferenceBlindSpot(s)); got != refMin {
				t.Fatalf("spec %d: MinimumVersion %s, reference %s, not explained by the reference bug (%s)\n%s",
					i, ourMin, refMin, got, data)
			}
			blindSpot++
		}
		_, refErr := refcdi.ReadSpec(path, 0)
		ourErr := s.Validate()
		if (refErr == nil) != (ourErr == nil) {
			var se *cdi.SpecError
			explained := refErr == nil && ourMin != refMin && errors.As(ourErr, &se) &&
				len(se.Problems) == 1 && se.Problems[0].Path == "cdiVersion"
			if !explained {
				t.Fatalf("spec %d: reference error %v, ours %v\n%s", i, refErr, ourErr, data)
			}
		}
		if ourErr == nil {
			valid++
		}
	}
	if valid < n/50 || valid > n-n/50 {
		t.Fatalf("%d of %d generated specs valid: the generator is lopsided", valid, n)
	}
	t.Logf("%d specs, %d valid for both, %d in the reference's blind spot", n, valid, blindSpot)
}

// withReferenceBlindSpot returns a copy of s without what the reference
// v1.1.1 fails to see when it computes the minimum version: its
// specs-go module is built with go 1.19 loop-variable semantics, and
// requiresV040/requiresV050 take the address of the loop variable for each
// device, so they only look at the last device's mount types and device
// node host paths. A spec declaring 0.3.0 with a typed mount in its first
// of two devices loads in the reference; cdi.Validate rejects it, since the
// feature needs 0.4.0 and a fixed runtime would reject it too.
func withReferenceBlindSpot(s *cdi.Spec) *cdi.Spec {
	c := *s
	c.Devices = make([]cdi.Device, len(s.Devices))
	for i, d := range s.Devices {
		if i < len(s.Devices)-1 {
			e := d.ContainerEdits
			e.Mounts = append([]cdi.Mount(nil), e.Mounts...)
			for j := range e.Mounts {
				e.Mounts[j].Type = ""
			}
			e.DeviceNodes = append([]cdi.DeviceNode(nil), e.DeviceNodes...)
			for j := range e.DeviceNodes {
				e.DeviceNodes[j].HostPath = ""
			}
			d.ContainerEdits = e
		}
		c.Devices[i] = d
	}
	return &c
}

// The blind spot, pinned: if a reference release fixes it, this fails and
// the exception above can go.
func TestReferenceBlindSpot(t *testing.T) {
	s := &cdi.Spec{Version: "0.3.0", Kind: "a/b", Devices: []cdi.Device{
		{Name: "x", ContainerEdits: cdi.ContainerEdits{Mounts: []cdi.Mount{{HostPath: "t", ContainerPath: "/t", Type: "tmpfs"}}}},
		{Name: "y", ContainerEdits: cdi.ContainerEdits{Env: []string{"A=1"}}},
	}}
	refMin, _ := specs.MinimumRequiredVersion(toReference(t, s))
	if refMin != "0.3.0" || cdi.MinimumVersion(s) != "0.4.0" {
		t.Errorf("reference %s, ours %s; want 0.3.0 and 0.4.0", refMin, cdi.MinimumVersion(s))
	}
	if !errors.Is(s.Validate(), cdi.ErrInvalidSpec) {
		t.Errorf("Validate accepted a typed mount under cdiVersion 0.3.0")
	}
}

// An empty but non-nil schemata list needs 1.1.0 in the reference; JSON
// cannot carry that (omitempty drops it), so build both values by hand.
func TestMinimumVersionEmptySchemata(t *testing.T) {
	ours := &cdi.Spec{Kind: "a/b", ContainerEdits: cdi.ContainerEdits{IntelRdt: &cdi.IntelRdt{Schemata: []string{}}}}
	ref := &specs.Spec{Kind: "a/b", ContainerEdits: specs.ContainerEdits{IntelRdt: &specs.IntelRdt{Schemata: []string{}}}}
	refMin, _ := specs.MinimumRequiredVersion(ref)
	if got := cdi.MinimumVersion(ours); got != refMin {
		t.Errorf("MinimumVersion %s, reference %s", got, refMin)
	}
}

func readGolden(t *testing.T, file string) *cdi.Spec {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cdi.DecodeSpec(data)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A null entry in a list of device nodes, hooks, mounts or net devices
// makes the reference panic while loading the spec (it validates through a
// nil pointer); ours decodes the entry as empty and Validate reports it.
// Pinned so that the difference stays known.
func TestNullEntries(t *testing.T) {
	for _, list := range []string{"deviceNodes", "hooks", "mounts", "netDevices"} {
		t.Run(list, func(t *testing.T) {
			data := []byte(`{"cdiVersion":"1.1.0","kind":"a/b","devices":[{"name":"x","containerEdits":{"env":["A=1"]}}],` +
				`"containerEdits":{"` + list + `":[null]}}`)
			path := filepath.Join(t.TempDir(), "spec.json")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			panicked := func() (p bool) {
				defer func() { p = recover() != nil }()
				_, _ = refcdi.ReadSpec(path, 0)
				return false
			}()
			if !panicked {
				t.Logf("the reference no longer panics on a null %s entry", list)
			}
			s, err := cdi.DecodeSpec(data)
			if err != nil {
				t.Fatal(err)
			}
			var se *cdi.SpecError
			if !errors.As(s.Validate(), &se) || !strings.HasPrefix(se.Problems[0].Path, "containerEdits."+list+"[0]") {
				t.Errorf("Validate: %v", s.Validate())
			}
		})
	}
}

func TestHookNamesMatchReference(t *testing.T) {
	ref := []string{refcdi.PrestartHook, refcdi.CreateRuntimeHook, refcdi.CreateContainerHook,
		refcdi.StartContainerHook, refcdi.PoststartHook, refcdi.PoststopHook}
	ours := cdi.HookNames()
	slices.Sort(ref)
	slices.Sort(ours)
	if !slices.Equal(ours, ref) {
		t.Errorf("hook names %q, reference %q", ours, ref)
	}
}
