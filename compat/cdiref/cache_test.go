package cdiref

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/dranode/dranode/cdi"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	refcdi "tags.cncf.io/container-device-interface/pkg/cdi"
)

const (
	vendor = "k8s.gpu.example.com"
	class  = "claim"
)

// claimSpec is what a driver writes for one claim: device names carry the
// claim UID, because names must be unique per kind across all spec files.
func claimSpec(claimUID string) *cdi.Spec {
	s := &cdi.Spec{
		Kind: vendor + "/" + class,
		Devices: []cdi.Device{{
			Name: claimUID + "-gpu-3",
			ContainerEdits: cdi.ContainerEdits{
				Env: []string{"GPU_CLAIM=" + claimUID},
				// /dev/null exists on every Linux host: the reference stats
				// the host node to fill in what the spec leaves out.
				DeviceNodes: []cdi.DeviceNode{{Path: "/dev/gpu3", HostPath: "/dev/null", Permissions: "rw"}},
				Mounts: []cdi.Mount{{HostPath: "/usr/lib/libgpu.so", ContainerPath: "/usr/lib/libgpu.so",
					Options: []string{"ro", "bind"}}},
			},
		}},
		ContainerEdits: cdi.ContainerEdits{
			Hooks: []cdi.Hook{{HookName: "createContainer", Path: "/usr/bin/gpu-hook", Args: []string{"gpu-hook", claimUID}}},
		},
	}
	s.Version = cdi.MinimumVersion(s)
	return s
}

func newCache(t *testing.T, dir string) *refcdi.Cache {
	t.Helper()
	cache, err := refcdi.NewCache(refcdi.WithSpecDirs(dir), refcdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("reference cache: %v", err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("reference cache reports errors for our specs: %v", errs)
	}
	return cache
}

func TestReferenceCacheLoadsAndInjects(t *testing.T) {
	dir := t.TempDir()
	specs := cdi.SpecDir{Path: dir}
	claims := []string{"0f3c2a9e-7b1d-4c3e-9f8a-2b6d5e4c1a00", "11111111-2222-3333-4444-555555555555"}
	var names []string
	for _, uid := range claims {
		s := claimSpec(uid)
		if _, err := specs.Write(s, uid); err != nil {
			t.Fatal(err)
		}
		names = append(names, cdi.QualifiedName(vendor, class, s.Devices[0].Name))
	}
	cache := newCache(t, dir)
	if got := cache.ListDevices(); !slices.Equal(got, names) {
		t.Fatalf("reference lists %q, want %q", got, names)
	}

	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	unresolved, err := cache.InjectDevices(spec, names[0])
	if err != nil || unresolved != nil {
		t.Fatalf("InjectDevices: %v (unresolved %v)", err, unresolved)
	}
	if !slices.Contains(spec.Process.Env, "GPU_CLAIM="+claims[0]) {
		t.Errorf("env not injected: %q", spec.Process.Env)
	}
	if len(spec.Linux.Devices) != 1 {
		t.Fatalf("devices %+v, want one", spec.Linux.Devices)
	}
	dev := spec.Linux.Devices[0]
	// Type and numbers come from the host's /dev/null (char 1:3).
	if dev.Path != "/dev/gpu3" || dev.Type != "c" || dev.Major != 1 || dev.Minor != 3 {
		t.Errorf("device node %+v, want /dev/gpu3 c 1:3", dev)
	}
	if r := spec.Linux.Resources; r == nil || len(r.Devices) != 1 || r.Devices[0].Access != "rw" || !r.Devices[0].Allow {
		t.Errorf("cgroup device rule %+v, want allow rw", spec.Linux.Resources)
	}
	if len(spec.Mounts) != 1 || spec.Mounts[0].Destination != "/usr/lib/libgpu.so" {
		t.Errorf("mounts %+v", spec.Mounts)
	}
	if h := spec.Hooks; h == nil || len(h.CreateContainer) != 1 || h.CreateContainer[0].Args[1] != claims[0] {
		t.Errorf("hooks %+v, want the createContainer hook of the first claim", spec.Hooks)
	}

	// A sweep keeping only the second claim: the reference no longer
	// knows the first claim's device, and still knows the second.
	removed, err := specs.Sweep(vendor, class, func(uid string) bool { return uid == claims[1] })
	if err != nil || len(removed) != 1 {
		t.Fatalf("Sweep removed %q, %v", removed, err)
	}
	cache = newCache(t, dir)
	if got := cache.ListDevices(); !slices.Equal(got, names[1:]) {
		t.Errorf("after sweep the reference lists %q, want %q", got, names[1:])
	}
	if _, err := cache.InjectDevices(&oci.Spec{Process: &oci.Process{}}, names[0]); err == nil {
		t.Errorf("swept device still injectable")
	}

	// Remove the last one: nothing left, and the reference is fine with that.
	if err := specs.Remove(vendor, class, claims[1]); err != nil {
		t.Fatal(err)
	}
	if got := newCache(t, dir).ListDevices(); len(got) != 0 {
		t.Errorf("after Remove the reference lists %q", got)
	}
}

// Every golden spec, written through SpecDir, loads in the reference
// cache; the file name convention is the reference's transient one.
func TestReferenceCacheLoadsGoldenSpecs(t *testing.T) {
	dir := t.TempDir()
	specs := cdi.SpecDir{Path: dir}
	for i, file := range goldenFiles(t) {
		s := readGolden(t, file)
		uid := "claim-" + string(rune('a'+i))
		path, err := specs.Write(s, uid)
		if err != nil {
			t.Fatal(err)
		}
		v, c, _ := cdi.ParseKind(s.Kind)
		if want := refcdi.GenerateTransientSpecName(v, c, uid) + ".json"; path != filepath.Join(dir, want) {
			t.Errorf("wrote %s, reference names it %s", path, want)
		}
		// Golden specs share kinds and device names; load each alone.
		cache := newCache(t, dir)
		if n := len(cache.ListDevices()); n != len(s.Devices) {
			t.Errorf("%s: reference sees %d devices, want %d", file, n, len(s.Devices))
		}
		if err := specs.Remove(v, c, uid); err != nil {
			t.Fatal(err)
		}
	}
}
