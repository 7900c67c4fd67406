package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/pluginmgr"
)

// Only a change of the set of unhealthy devices changes the slices: a
// repeated snapshot, a new message, and a device going from healthy to
// unknown (or missing from the snapshot) are not changes.
func TestSetHealthChangesOnlyOnANewUnhealthySet(t *testing.T) {
	dh := func(dev string, s pluginmgr.HealthStatus, msg string) pluginmgr.DeviceHealth {
		return pluginmgr.DeviceHealth{Pool: "p", Device: dev, Status: s, Message: msg}
	}
	steps := []struct {
		name string
		snap []pluginmgr.DeviceHealth
		want bool
	}{
		{"all healthy at start", []pluginmgr.DeviceHealth{dh("a", pluginmgr.Healthy, ""), dh("b", pluginmgr.Healthy, "")}, false},
		{"same again", []pluginmgr.DeviceHealth{dh("a", pluginmgr.Healthy, ""), dh("b", pluginmgr.Healthy, "")}, false},
		{"b unhealthy", []pluginmgr.DeviceHealth{dh("a", pluginmgr.Healthy, ""), dh("b", pluginmgr.Unhealthy, "x")}, true},
		{"b unhealthy, new message", []pluginmgr.DeviceHealth{dh("a", pluginmgr.Healthy, ""), dh("b", pluginmgr.Unhealthy, "y")}, false},
		{"a unknown", []pluginmgr.DeviceHealth{dh("a", pluginmgr.HealthUnknown, ""), dh("b", pluginmgr.Unhealthy, "y")}, false},
		{"a unhealthy too", []pluginmgr.DeviceHealth{dh("b", pluginmgr.Unhealthy, ""), dh("a", pluginmgr.Unhealthy, "")}, true},
		{"same set, other order", []pluginmgr.DeviceHealth{dh("a", pluginmgr.Unhealthy, ""), dh("b", pluginmgr.Unhealthy, "")}, false},
		{"b missing from the snapshot", []pluginmgr.DeviceHealth{dh("a", pluginmgr.Unhealthy, "")}, true},
		{"all healthy", []pluginmgr.DeviceHealth{dh("a", pluginmgr.Healthy, "")}, true},
		{"empty snapshot", nil, false},
	}
	var h healthTaints
	for _, s := range steps {
		if got := h.setHealth(logr.Discard(), s.snap); got != s.want {
			t.Errorf("%s: changed = %v, want %v", s.name, got, s.want)
		}
	}
}

// What is published for the same health on a server that keeps device
// taints and on one that does not: the unhealthy device tainted, or left
// out; the gauges follow.
func TestPublishedTaintsOrWithdraws(t *testing.T) {
	taint := resourcev1.DeviceTaint{Key: gpuDriver + "/unhealthy", Effect: resourcev1.DeviceTaintEffectNoSchedule}
	h := healthTaints{taint: taint, own: inventory.Inventory{Pools: []inventory.Pool{{Name: "p", Devices: []resourcev1.Device{{Name: "a"}, {Name: "b"}}}}}}
	h.setHealth(logr.Discard(), []pluginmgr.DeviceHealth{{Pool: "p", Device: "b", Status: pluginmgr.Unhealthy}})
	for _, tc := range []struct {
		withdraw           bool
		want               string
		tainted, withdrawn int64
	}{
		{false, "a=[] b=[gpu.example.com/unhealthy]", 1, 0},
		{true, "a=[]", 0, 1},
		{false, "a=[] b=[gpu.example.com/unhealthy]", 1, 0},
	} {
		var got []string
		for _, d := range h.published(tc.withdraw).Pools[0].Devices {
			var keys []string
			for _, ta := range d.Taints {
				keys = append(keys, ta.Key)
			}
			got = append(got, fmt.Sprintf("%s=%v", d.Name, keys))
		}
		if strings.Join(got, " ") != tc.want || h.tainted.Load() != tc.tainted || h.withdrawn.Load() != tc.withdrawn {
			t.Errorf("withdraw=%v: published %q, tainted %d, withdrawn %d; want %q, %d, %d",
				tc.withdraw, got, h.tainted.Load(), h.withdrawn.Load(), tc.want, tc.tainted, tc.withdrawn)
		}
	}
	if len(h.own.Pools[0].Devices) != 2 || h.own.Pools[0].Devices[1].Taints != nil {
		t.Errorf("the plugin's own inventory changed: %+v", h.own)
	}
}

// dryRunTaints reads the standalone agent's slices: device name → its
// taints as "key=effect".
func dryRunTaints(t *testing.T, dir string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, s := range dryRunSlices(t, dir) {
		for _, d := range s.Spec.Devices {
			out[d.Name] = nil
			for _, ta := range d.Taints {
				out[d.Name] = append(out[d.Name], ta.Key+"="+string(ta.Effect))
			}
		}
	}
	return out
}

// driverValue is the value of the gauge or counter name{driver=driver}.
func driverValue(t *testing.T, reg *prometheus.Registry, name, driver string) (float64, bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "driver" && l.GetValue() == driver {
					if g := m.GetGauge(); g != nil {
						return g.GetValue(), true
					}
					return m.GetCounter().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// With the real example plugin: a GPU marked unhealthy is published with
// the configured taint, and loses it when the mark is gone; the gauge
// follows.
func TestUnhealthyDeviceTaintedInSlices(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	e.cfg.Slices.UnhealthyTaintEffect = string(resourcev1.DeviceTaintEffectNoExecute)
	reg := prometheus.NewRegistry()
	e.start(t, Options{Registry: reg})
	key := gpuDriver + "/unhealthy"
	wait := func(what string, ok func(map[string][]string, float64) bool) {
		t.Helper()
		var got map[string][]string
		var g float64
		for range 600 { // 30 s
			got = dryRunTaints(t, e.cfg.Slices.DryRunDir)
			g, _ = driverValue(t, reg, "dranode_devices_tainted", gpuDriver)
			if ok(got, g) {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s: slices' taints %v, dranode_devices_tainted %v", what, got, g)
	}
	wait("at start", func(got map[string][]string, g float64) bool {
		return len(got) == 4 && got["gpu-2"] == nil && g == 0
	})
	marker := filepath.Join(e.root, "dev", gpuDriver, "gpu2.unhealthy")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wait("gpu2 marked unhealthy", func(got map[string][]string, g float64) bool {
		return slices.Equal(got["gpu-2"], []string{key + "=NoExecute"}) && got["gpu-1"] == nil && g == 1
	})
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	wait("gpu2 healthy again", func(got map[string][]string, g float64) bool {
		return len(got) == 4 && got["gpu-2"] == nil && g == 0
	})
}

// A GPU that is unhealthy when the agent starts is tainted in the first
// slices written: the first publish waits for the plugin's first health
// snapshot, so the device is never published as allocatable and the slice
// is written once, not once untainted and again tainted.
func TestUnhealthyAtStartTaintedInTheFirstPublish(t *testing.T) {
	e := newTestEnv(t, gpuDriver)
	devRoot := e.cfg.Plugins.Drivers[0].Config["devRoot"].(string)
	if err := os.MkdirAll(devRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(devRoot, "gpu1.unhealthy"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e.start(t, Options{Registry: reg})
	var got map[string][]string
	for range 600 { // 30 s
		if got = dryRunTaints(t, e.cfg.Slices.DryRunDir); len(got) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if want := []string{gpuDriver + "/unhealthy=NoSchedule"}; len(got) != 4 || !slices.Equal(got["gpu-1"], want) {
		t.Fatalf("first slices' taints %v, want gpu-1 tainted %v", got, want)
	}
	if n, _ := driverValue(t, reg, "dranode_dry_run_slice_files_written_total", gpuDriver); n != 1 {
		t.Errorf("slice files written: %v, want 1 (the first publish, already tainted)", n)
	}
	// Nothing written since, shown by the next change rather than by a
	// pause: gpu1 heals, and its publish is the second write, not a third.
	if err := os.Remove(filepath.Join(devRoot, "gpu1.unhealthy")); err != nil {
		t.Fatal(err)
	}
	for range 600 { // 30 s
		if got = dryRunTaints(t, e.cfg.Slices.DryRunDir); len(got) == 4 && got["gpu-1"] == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got["gpu-1"] != nil {
		t.Fatalf("slices' taints %v after gpu1 healed, want none", got)
	}
	if n, _ := driverValue(t, reg, "dranode_dry_run_slice_files_written_total", gpuDriver); n != 2 {
		t.Errorf("slice files written: %v, want 2 (the first publish, already tainted; gpu1 healed)", n)
	}
}

// Device taints are alpha and off by default before Kubernetes 1.36
// (DRADeviceTaints in each release's pkg/features): there the agent
// withdraws unhealthy devices from the start.
func TestTaintsOffByDefault(t *testing.T) {
	for minor, want := range map[int]bool{0: false, 33: true, 34: true, 35: true, 36: false, 37: false, 38: false} {
		if got := taintsOffByDefault(minor); got != want {
			t.Errorf("taintsOffByDefault(%d) = %v, want %v", minor, got, want)
		}
	}
}
