package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/pluginmgr/conformance"
	"github.com/dranode/dranode/pluginmgr/plugintest"
)

// pluginBinary is gpu-plugin itself, built once by TestMain.
var pluginBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpu-plugin-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pluginBinary, err = plugintest.Build(context.Background(), "", ".", filepath.Join(dir, "gpu-plugin"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func launchGPU(t *testing.T, cfg map[string]any, opts pluginmgr.Options) *pluginmgr.Plugin {
	t.Helper()
	b, err := os.ReadFile(pluginBinary)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	opts.StartTimeout = 20 * time.Second
	p, err := pluginmgr.Launch(context.Background(), pluginmgr.PluginConfig{Path: pluginBinary, SHA256: hex.EncodeToString(sum[:]), Config: raw}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestConformance(t *testing.T) {
	p := launchGPU(t, map[string]any{"devRoot": t.TempDir()}, pluginmgr.Options{})
	t.Run("shared and partitioned", func(t *testing.T) {
		conformance.Run(t, launchGPU(t, map[string]any{"devRoot": t.TempDir(), "sharedGPUs": 1, "partitionedGPUs": 1}, pluginmgr.Options{}), conformance.Options{})
	})
	conformance.Run(t, p, conformance.Options{})
	inv, _, err := p.WaitInventory(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(inv.Pools[0].Devices); n != 8 {
		t.Errorf("default inventory has %d devices, want 8", n)
	}
}

func TestConfiguredDriverName(t *testing.T) {
	p := launchGPU(t, map[string]any{"devRoot": t.TempDir(), "driverName": "sim.gpu.example.org", "numDevices": 3}, pluginmgr.Options{})
	if got := p.Info().DriverName; got != "sim.gpu.example.org" {
		t.Errorf("driver name = %q", got)
	}
	inv, _, err := p.WaitInventory(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	dev := inv.Pools[0].Devices[2]
	if len(inv.Pools[0].Devices) != 3 || *dev.Attributes["uuid"].StringValue != deviceUUID("sim.gpu.example.org", 2) || *dev.Attributes["index"].IntValue != 2 {
		t.Errorf("inventory = %+v", inv)
	}
}

// launchForHealth starts the plugin with two GPUs, a health poll of an
// hour (so that whatever a test sees comes through the watches) and cfg's
// other keys; it checks that the plugin reports health and that its first
// snapshot has both healthy, and returns its devRoot and the snapshots
// that follow.
func launchForHealth(t *testing.T, cfg map[string]any) (string, chan []pluginmgr.DeviceHealth) {
	t.Helper()
	devRoot := t.TempDir()
	all := map[string]any{"devRoot": devRoot, "numDevices": 2, "healthPollInterval": "1h"}
	for k, v := range cfg {
		all[k] = v
	}
	updates := make(chan []pluginmgr.DeviceHealth, 16)
	p := launchGPU(t, all, pluginmgr.Options{OnHealth: func(_ string, h []pluginmgr.DeviceHealth) { updates <- h }})
	if !p.Info().Health {
		t.Fatal("gpu-plugin does not announce health reporting")
	}
	if first := <-updates; first[0].Status != pluginmgr.Healthy || first[1].Status != pluginmgr.Healthy {
		t.Fatalf("first health snapshot = %+v", first)
	}
	return devRoot, updates
}

func TestHealthThroughHost(t *testing.T) {
	devRoot, updates := launchForHealth(t, map[string]any{"healthPollInterval": "20ms"})
	if err := os.WriteFile(filepath.Join(devRoot, "gpu1.unhealthy"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if next := <-updates; next[1].Status != pluginmgr.Unhealthy || next[0].Status != pluginmgr.Healthy {
		t.Fatalf("after marking gpu1 unhealthy: %+v", next)
	}
}

// TestHostDeviceNodeGoneSeenAtOnce: the device node every GPU stands on
// going makes every GPU unhealthy without waiting for the poll (an hour
// here), and its return makes them healthy again.
func TestHostDeviceNodeGoneSeenAtOnce(t *testing.T) {
	// A symbolic link to /dev/null is a character device to the plugin
	// (it follows links, as a runtime does) and needs no mknod.
	node := filepath.Join(t.TempDir(), "gpu-node")
	if err := os.Symlink("/dev/null", node); err != nil {
		t.Fatal(err)
	}
	_, updates := launchForHealth(t, map[string]any{"hostDeviceNode": node})
	if err := os.Remove(node); err != nil {
		t.Fatal(err)
	}
	next := <-updates
	for i, h := range next {
		if h.Status != pluginmgr.Unhealthy || !strings.Contains(h.Message, "hostDeviceNode") {
			t.Errorf("GPU %d after its host device node went: %+v", i, h)
		}
	}
	if err := os.Symlink("/dev/null", node); err != nil {
		t.Fatal(err)
	}
	if next := <-updates; next[0].Status != pluginmgr.Healthy || next[1].Status != pluginmgr.Healthy {
		t.Fatalf("after the host device node came back: %+v", next)
	}
}

func TestBadConfigRefusesStart(t *testing.T) {
	b, _ := os.ReadFile(pluginBinary)
	sum := sha256.Sum256(b)
	_, err := pluginmgr.Launch(context.Background(), pluginmgr.PluginConfig{Path: pluginBinary, SHA256: hex.EncodeToString(sum[:]), Config: []byte(`{"numDevices": "eight"}`)},
		pluginmgr.Options{Logger: hclog.NewNullLogger(), StartTimeout: 20 * time.Second})
	if err == nil || !containsAll(err.Error(), "Configure", "numDevices") {
		t.Fatalf("Launch with a bad config = %v", err)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TestHealthMarkersSeenWithoutPolling: with a poll beyond the test's
// life (launchForHealth's hour), a marker made and removed still reaches the host (the watch of
// devRoot).
func TestHealthMarkersSeenWithoutPolling(t *testing.T) {
	devRoot, updates := launchForHealth(t, nil)
	marker := filepath.Join(devRoot, "gpu0.unhealthy")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if next := <-updates; next[0].Status != pluginmgr.Unhealthy {
		t.Fatalf("after marking gpu0 unhealthy: %+v", next)
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	if next := <-updates; next[0].Status != pluginmgr.Healthy {
		t.Fatalf("after removing the marker: %+v", next)
	}
}
