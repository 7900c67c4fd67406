package loop_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/dranode/dranode/examples/loop/internal/looptest"
	"github.com/dranode/dranode/examples/loop/loopdev"
	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/pluginmgr/conformance"
	"github.com/dranode/dranode/pluginmgr/plugintest"
)

// pluginBinary is loop-plugin itself, built once by TestMain: every test
// talks to a real plugin process through go-plugin, as the agent does.
var pluginBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "loop-plugin-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pluginBinary, err = plugintest.Build(context.Background(), "", "./cmd/loop-plugin", filepath.Join(dir, "loop-plugin"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func launch(t *testing.T, cfg map[string]any, opts pluginmgr.Options) *pluginmgr.Plugin {
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
	opts.NodeName = "node-a"
	opts.StartTimeout = 20 * time.Second
	p, err := pluginmgr.Launch(context.Background(), pluginmgr.PluginConfig{Name: "loop", Path: pluginBinary, SHA256: hex.EncodeToString(sum[:]), Config: raw}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// setup takes the host's loop devices for t and returns a state directory
// whose disks are detached when t ends.
func setup(t *testing.T) string {
	dir := t.TempDir()
	looptest.Require(t, dir)
	return dir
}

func claimFor(disks ...string) pluginmgr.Claim {
	c := pluginmgr.Claim{UID: types.UID("uid-" + strings.Join(disks, "-")), Namespace: "ns", Name: "claim"}
	for _, d := range disks {
		c.Results = append(c.Results, resourcev1.DeviceRequestAllocationResult{Request: "disk", Driver: "loop.example.com", Pool: "node-a", Device: d})
	}
	return c
}

func prepare(t *testing.T, p *pluginmgr.Plugin, c pluginmgr.Claim) ([]pluginmgr.PreparedDevice, error) {
	t.Helper()
	res, err := p.Prepare(t.Context(), []pluginmgr.Claim{c})
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Devices, res[0].Err
}

func mustPrepare(t *testing.T, p *pluginmgr.Plugin, c pluginmgr.Claim) []pluginmgr.PreparedDevice {
	t.Helper()
	devs, err := prepare(t, p, c)
	if err != nil {
		t.Fatalf("Prepare %s: %v", c.UID, err)
	}
	return devs
}

func unprepare(t *testing.T, p *pluginmgr.Plugin, c pluginmgr.Claim, devs []pluginmgr.PreparedDevice) {
	t.Helper()
	res, err := p.Unprepare(t.Context(), []pluginmgr.PreparedClaim{{UID: c.UID, Namespace: c.Namespace, Name: c.Name, Devices: devs}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil {
		t.Fatalf("Unprepare %s: %v", c.UID, res[0].Err)
	}
}

func TestConformance(t *testing.T) {
	dir := setup(t)
	p := launch(t, map[string]any{"stateDir": dir, "size": "1Mi"}, pluginmgr.Options{})
	conformance.Run(t, p, conformance.Options{})
}

// The container edits name the loop device by its real numbers, and what
// one claim wrote is gone when the next claim gets the disk.
func TestNextClaimReadsZeros(t *testing.T) {
	dir := setup(t)
	p := launch(t, map[string]any{"stateDir": dir, "size": "1Mi"}, pluginmgr.Options{})

	first := claimFor("disk-1")
	devs := mustPrepare(t, p, first)
	node := devs[0].Edits.DeviceNodes[0]
	var host loopdev.Host
	held, _, err := host.Held(filepath.Join(dir, "disk-1.img"))
	if err != nil || len(held) != 1 {
		t.Fatalf("loop devices holding disk-1: %+v, %v", held, err)
	}
	want := pluginmgr.DeviceNode{Path: "/dev/loop.example.com/disk-1", HostPath: fmt.Sprintf("/dev/loop%d", held[0].Index), Type: "b", Major: 7, Minor: int64(held[0].Minor), Permissions: "rw"}
	if !reflect.DeepEqual(node, want) {
		t.Fatalf("device node = %+v, want %+v", node, want)
	}
	if env := devs[0].Edits.Env; len(env) != 1 || env[0] != "LOOP_DEVICE_LOOP_EXAMPLE_COM_1=/dev/loop.example.com/disk-1" {
		t.Errorf("env = %v", env)
	}

	// What a pod does with the device.
	pattern := bytes.Repeat([]byte("claim-1 "), 4096)
	writeAndSync(t, node.HostPath, pattern)
	if got := readDevice(t, node.HostPath); !bytes.Equal(got[:len(pattern)], pattern) {
		t.Fatal("the pattern did not read back")
	}
	// An admin-access claim watches the disk next to its owner; its
	// Unprepare (the host says AdminAccess) leaves the owner's data.
	admin := claimFor("disk-1")
	admin.UID = "uid-admin"
	admin.Results[0].AdminAccess = ptr.To(true)
	adminDevs := mustPrepare(t, p, admin)
	for i := range adminDevs {
		adminDevs[i].AdminAccess = true
	}
	unprepare(t, p, admin, adminDevs)
	if got := readDevice(t, node.HostPath); !bytes.Equal(got[:len(pattern)], pattern) {
		t.Fatal("an admin-access claim's Unprepare zeroed the owner's disk")
	}
	unprepare(t, p, first, devs)

	second := claimFor("disk-1")
	second.UID = "uid-second"
	again := mustPrepare(t, p, second)
	if again[0].Edits.DeviceNodes[0].HostPath != node.HostPath {
		t.Errorf("disk-1 moved from %s to %s", node.HostPath, again[0].Edits.DeviceNodes[0].HostPath)
	}
	if got := readDevice(t, node.HostPath); !allZero(got) {
		t.Fatal("the next claim reads the previous claim's data")
	}
}

func TestHealthFromTheKernel(t *testing.T) {
	dir := setup(t)
	updates := make(chan []pluginmgr.DeviceHealth, 64)
	p := launch(t, map[string]any{"stateDir": dir, "size": "1Mi", "healthPollInterval": "10ms"},
		pluginmgr.Options{OnHealth: func(_ string, h []pluginmgr.DeviceHealth) { updates <- h }})
	if !p.Info().Health {
		t.Fatal("loop-plugin does not announce health reporting")
	}
	waitHealth(t, updates, "both disks attached", pluginmgr.Healthy, pluginmgr.Healthy)

	// Someone else detaches disk-1's loop device.
	file1 := filepath.Join(dir, "disk-1.img")
	var host loopdev.Host
	held, _, err := host.Held(file1)
	if err != nil || len(held) != 1 {
		t.Fatalf("loop devices holding disk-1: %+v, %v", held, err)
	}
	if err := host.Detach(held[0].Index, file1); err != nil {
		t.Fatal(err)
	}
	h := waitHealth(t, updates, "disk-1 detached", pluginmgr.Healthy, pluginmgr.Unhealthy)
	if !strings.Contains(h[1].Message, "no loop device holds") {
		t.Errorf("disk-1's message: %q", h[1].Message)
	}

	// Someone deletes disk-0's backing file.
	if err := os.Remove(filepath.Join(dir, "disk-0.img")); err != nil {
		t.Fatal(err)
	}
	h = waitHealth(t, updates, "disk-0's file deleted", pluginmgr.Unhealthy, pluginmgr.Unhealthy)
	if !strings.Contains(h[0].Message, "was deleted") {
		t.Errorf("disk-0's message: %q", h[0].Message)
	}

	// Prepare repairs both: a fresh file for disk-0, an attach for disk-1.
	mustPrepare(t, p, claimFor("disk-0", "disk-1"))
	waitHealth(t, updates, "both prepared again", pluginmgr.Healthy, pluginmgr.Healthy)
}

// waitHealth waits for a snapshot with the wanted status per disk.
func waitHealth(t *testing.T, updates <-chan []pluginmgr.DeviceHealth, what string, want ...pluginmgr.HealthStatus) []pluginmgr.DeviceHealth {
	t.Helper()
	var last []pluginmgr.DeviceHealth
	for {
		select {
		case h := <-updates:
			last = h
			ok := len(h) == len(want)
			for i := range want {
				ok = ok && h[i].Status == want[i]
			}
			if ok {
				return h
			}
		case <-testDeadline(t).Done():
			t.Fatalf("%s: no health snapshot %v; the last was %+v", what, want, last)
		}
	}
}

// A plugin killed after attaching but before answering leaves an attached
// disk; the restarted plugin (or the agent's retry) must find it, not
// attach the file a second time, and answer as before.
func TestSurvivesSIGKILL(t *testing.T) {
	dir := setup(t)
	// disk-1's file attached as a killed plugin would have left it.
	file1 := filepath.Join(dir, "disk-1.img")
	if err := os.WriteFile(file1, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	var host loopdev.Host
	left, err := host.Attach(file1)
	if err != nil {
		t.Fatal(err)
	}

	statuses := make(chan pluginmgr.Status, 16)
	p := launch(t, map[string]any{"stateDir": dir, "size": "1Mi"}, pluginmgr.Options{
		OnStatus: func(s pluginmgr.Status) { statuses <- s },
		Backoff:  pluginmgr.Backoff{Initial: time.Millisecond, Max: time.Millisecond},
	})
	c := claimFor("disk-0", "disk-1")
	before := mustPrepare(t, p, c)
	if got := before[1].Edits.DeviceNodes[0].Minor; got != int64(left.Minor) {
		t.Errorf("disk-1 prepared on minor %d, but loop%d already held it", got, left.Index)
	}

	if err := syscall.Kill(p.Status().PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for restarted := false; !restarted; {
		select {
		case s := <-statuses:
			restarted = s.State == pluginmgr.StateRunning && s.Restarts == 1
		case <-testDeadline(t).Done():
			t.Fatalf("the killed plugin was not restarted: %+v", p.Status())
		}
	}
	after := mustPrepare(t, p, c)
	if !reflect.DeepEqual(withoutTimes(before), withoutTimes(after)) {
		t.Errorf("Prepare after the restart = %+v, before %+v", after, before)
	}
	for _, disk := range []string{"disk-0.img", "disk-1.img"} {
		if held, _, err := host.Held(filepath.Join(dir, disk)); err != nil || len(held) != 1 {
			t.Errorf("%s is held by %d loop devices (%v), want 1", disk, len(held), err)
		}
	}
	unprepare(t, p, c, after)
	unprepare(t, p, c, after)
}

// Bad input fails the claim that needs it, naming the cause, and leaves
// the disks already prepared as they were.
func TestBadInputNamesTheCause(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   func(dir string, prepared int) map[string]any
		setup func(t *testing.T, dir string)
		want  []string
	}{{
		name: "no loop control device",
		cfg: func(dir string, _ int) map[string]any {
			return map[string]any{"loopControl": filepath.Join(dir, "loop-control")}
		},
		want: []string{"device disk-1", "loop control device", "loop-control", "no such file or directory"},
	}, {
		name: "no free loop device",
		cfg:  func(_ string, prepared int) map[string]any { return map[string]any{"loopDevices": []int{prepared}} },
		want: []string{"device disk-1", "no free loop device among the allowed loop devices"},
	}, {
		name: "backing file cannot be created",
		setup: func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, "disk-1.img"), 0o700); err != nil {
				t.Fatal(err)
			}
		},
		want: []string{"device disk-1", "creating backing file", "disk-1.img", "is a directory"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := setup(t)
			// disk-0 was prepared by an earlier run of the plugin.
			file0 := filepath.Join(dir, "disk-0.img")
			if err := os.WriteFile(file0, make([]byte, 1<<20), 0o600); err != nil {
				t.Fatal(err)
			}
			var host loopdev.Host
			d0, err := host.Attach(file0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			cfg := map[string]any{}
			if tc.cfg != nil {
				cfg = tc.cfg(dir, d0.Index)
			}
			cfg["stateDir"], cfg["size"] = dir, "1Mi"
			p := launch(t, cfg, pluginmgr.Options{})

			ok := mustPrepare(t, p, claimFor("disk-0"))
			_, err = prepare(t, p, claimFor("disk-1"))
			if err == nil {
				t.Fatal("Prepare of disk-1 succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			again := mustPrepare(t, p, claimFor("disk-0"))
			if !reflect.DeepEqual(withoutTimes(ok), withoutTimes(again)) || ok[0].Edits.DeviceNodes[0].Minor != int64(d0.Minor) {
				t.Errorf("disk-0 changed: first %+v, then %+v (loop%d)", ok, again, d0.Index)
			}
			if now, err := loopdev.Read("/sys", d0.Index); err != nil || now.BackingFile != file0 {
				t.Errorf("loop%d now %+v, %v; want it to hold %s still", d0.Index, now, err, file0)
			}
		})
	}
}

func TestBadConfigRefusesStart(t *testing.T) {
	b, _ := os.ReadFile(pluginBinary)
	sum := sha256.Sum256(b)
	_, err := pluginmgr.Launch(context.Background(), pluginmgr.PluginConfig{Name: "loop", Path: pluginBinary, SHA256: hex.EncodeToString(sum[:]), Config: []byte(`{"size": "1000"}`)},
		pluginmgr.Options{Logger: hclog.NewNullLogger(), StartTimeout: 20 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "Configure") || !strings.Contains(err.Error(), `size "1000"`) {
		t.Fatalf("Launch with a bad config = %v", err)
	}
}

func withoutTimes(devs []pluginmgr.PreparedDevice) []pluginmgr.PreparedDevice {
	out := make([]pluginmgr.PreparedDevice, len(devs))
	for i, d := range devs {
		if d.Status != nil {
			st := d.Status.DeepCopy()
			for j := range st.Conditions {
				st.Conditions[j].LastTransitionTime = metav1.Time{}
			}
			d.Status = st
		}
		out[i] = d
	}
	return out
}

func writeAndSync(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func readDevice(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return len(b) > 0
}

// "loop-plugin detach" leaves none of the state directory's disks
// attached, and touches no other loop device.
func TestDetachCommand(t *testing.T) {
	dir := setup(t)
	other := t.TempDir()
	looptest.DetachUnderOnCleanup(t, other)
	otherFile := filepath.Join(other, "other.img")
	if err := os.WriteFile(otherFile, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	var host loopdev.Host
	otherDev, err := host.Attach(otherFile)
	if err != nil {
		t.Fatal(err)
	}
	p := launch(t, map[string]any{"stateDir": dir, "size": "1Mi"}, pluginmgr.Options{})
	mustPrepare(t, p, claimFor("disk-0", "disk-1"))
	p.Close()

	// A path relative to the working directory, as an operator types it.
	detach := exec.Command(pluginBinary, "detach", filepath.Base(dir))
	detach.Dir = filepath.Dir(dir)
	if out, err := detach.CombinedOutput(); err != nil {
		t.Fatalf("loop-plugin detach: %v\n%s", err, out)
	}
	for _, disk := range []string{"disk-0.img", "disk-1.img"} {
		if live, stale, err := host.Held(filepath.Join(dir, disk)); err != nil || len(live)+len(stale) != 0 {
			t.Errorf("%s still attached: %+v %+v %v", disk, live, stale, err)
		}
	}
	if live, _, err := host.Held(otherFile); err != nil || len(live) != 1 || live[0].Index != otherDev.Index {
		t.Errorf("the other file's loop device changed: %+v, %v", live, err)
	}
}

// testDeadline is done when t ends or shortly before go test's -timeout
// would kill the binary, so that a wait that never ends fails t with what
// it waited for instead of a dump of every goroutine (and cleanups run,
// detaching the loop devices).
func testDeadline(t *testing.T) context.Context {
	d, ok := t.Deadline()
	if !ok {
		return t.Context()
	}
	ctx, cancel := context.WithDeadline(t.Context(), d.Add(-10*time.Second))
	t.Cleanup(cancel)
	return ctx
}
