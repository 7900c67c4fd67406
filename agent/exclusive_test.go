package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dranode/dranode/agent/config"
	"github.com/dranode/dranode/claimcache"
)

// journalEnv is an agent environment with the journal plugin (a real
// process that logs every call it gets) serving journalDriver.
func journalEnv(t *testing.T, stateless bool) (e *testEnv, calls, failUnprepare string) {
	t.Helper()
	e = newTestEnv(t)
	plugin := journalPlugin(t)
	calls = filepath.Join(e.root, "calls")
	failUnprepare = filepath.Join(e.root, "fail-unprepare")
	e.cfg.Plugins.Drivers = []config.Driver{{Name: "journal", Path: plugin, SHA256: sha256File(t, plugin),
		Config: map[string]any{"driverName": journalDriver, "numDevices": 4, "callLog": calls, "failUnprepare": failUnprepare, "statelessPrepare": stateless}}}
	return e, calls, failUnprepare
}

// pluginCalls counts the calls of op ("prepare", "unprepare") for a claim
// in the journal plugin's log.
func pluginCalls(t *testing.T, calls, op string, c *resourcev1.ResourceClaim) int {
	t.Helper()
	n := 0
	for _, line := range callLines(t, calls) {
		if strings.HasPrefix(line, op+" "+string(c.UID)+" ") {
			n++
		}
	}
	return n
}

// refusal returns the error the kubelet got for c, failing unless it is a
// refusal naming the device and the holder.
func refusal(t *testing.T, k *kubelet, c, holder *resourcev1.ResourceClaim, device, holderState string) string {
	t.Helper()
	r := k.prepare(t, c)[string(c.UID)]
	if r == nil || r.Error == "" {
		t.Fatalf("prepare of %s/%s succeeded (%v) while %s/%s holds %s", c.Namespace, c.Name, r, holder.Namespace, holder.Name, device)
	}
	for _, want := range []string{
		fmt.Sprintf("device %s/pool-a/%s ", journalDriver, device),
		fmt.Sprintf(" is in use by claim %s/%s (uid %s, %s): claim %s/%s (uid %s) gets it once that claim is unprepared",
			holder.Namespace, holder.Name, holder.UID, holderState, c.Namespace, c.Name, c.UID),
	} {
		if !strings.Contains(r.Error, want) {
			t.Fatalf("refusal %q\ndoes not say %q", r.Error, want)
		}
	}
	return r.Error
}

// Two claims for one device: the second is refused before its plugin is
// called, with a message naming the device and the claim that holds it,
// counted in dranode_prepare_refused_total; the refusal outlives an agent
// restart (the record is what holds), an admin access claim is prepared
// beside it, and once the first claim is unprepared the kubelet's retry
// prepares the second.
func TestDeviceHeldByAnotherClaimIsRefused(t *testing.T) {
	for _, stateless := range []bool{false, true} {
		t.Run(fmt.Sprint("statelessPrepare=", stateless), func(t *testing.T) {
			e, calls, _ := journalEnv(t, stateless)
			reg := prometheus.NewRegistry()
			a := e.start(t, Options{Registry: reg})
			first := claim("default", "first", "00000000-0000-0000-0041-000000000001", "node-a", [2]string{journalDriver, "gpu-0"})
			second := claim("team-b", "second", "00000000-0000-0000-0041-000000000002", "node-a", [2]string{journalDriver, "gpu-1"}, [2]string{journalDriver, "gpu-0"})
			admin := claim("monitoring", "admin", "00000000-0000-0000-0041-000000000003", "node-a", [2]string{journalDriver, "gpu-0"})
			admin.Status.Allocation.Devices.Results[0].AdminAccess = ptrTo(true)
			for _, c := range []*resourcev1.ResourceClaim{first, second, admin} {
				e.writeClaim(t, c)
			}
			k := connectKubelet(t, e.cfg, journalDriver)
			mustPrepared(t, k.prepare(t, first), first)

			refusal(t, k, second, first, "gpu-0", "prepared")
			if n := pluginCalls(t, calls, "prepare", second); n != 0 {
				t.Fatalf("the refused claim reached the plugin %d times", n)
			}
			if _, err := a.record.Cache().Get(string(second.UID)); !errors.Is(err, claimcache.ErrNotFound) {
				t.Fatalf("the refused claim is recorded: %v", err)
			}
			if n := counterValue(t, reg, "dranode_prepare_refused_total", map[string]string{"driver": journalDriver, "reason": "device_in_use"}); n != 1 {
				t.Fatalf("dranode_prepare_refused_total = %v, want 1", n)
			}
			mustPrepared(t, k.prepare(t, admin), admin)
			mustPrepared(t, k.prepare(t, first), first) // the same claim again: from the record

			// A new instance opens the record and holds what it holds.
			if err := a.Stop(); err != nil {
				t.Fatal(err)
			}
			a = e.start(t, Options{})
			k = connectKubelet(t, e.cfg, journalDriver)
			refusal(t, k, second, first, "gpu-0", "prepared")

			if r := k.unprepare(t, first)[string(first.UID)]; r.Error != "" {
				t.Fatal(r.Error)
			}
			mustPrepared(t, k.prepare(t, second), second)
			if n := pluginCalls(t, calls, "prepare", second); n != 1 {
				t.Fatalf("the second claim reached the plugin %d times, want once", n)
			}
			// And now the first claim waits for the second.
			refusal(t, k, first, second, "gpu-0", "prepared")
		})
	}
}

// Never handed over dirty: a plugin's Unprepare that fails leaves the
// claim in the record holding its device, so the device's next claim is
// refused until the unprepare succeeds.
func TestFailedUnprepareHoldsTheDevice(t *testing.T) {
	for _, stateless := range []bool{false, true} {
		t.Run(fmt.Sprint("statelessPrepare=", stateless), func(t *testing.T) {
			e, calls, failUnprepare := journalEnv(t, stateless)
			a := e.start(t, Options{})
			first := claim("default", "first", "00000000-0000-0000-0041-000000000011", "node-a", [2]string{journalDriver, "gpu-2"})
			second := claim("default", "second", "00000000-0000-0000-0041-000000000012", "node-a", [2]string{journalDriver, "gpu-2"})
			e.writeClaim(t, first)
			e.writeClaim(t, second)
			k := connectKubelet(t, e.cfg, journalDriver)
			mustPrepared(t, k.prepare(t, first), first)

			if err := os.WriteFile(failUnprepare, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			r := k.unprepare(t, first)[string(first.UID)]
			if r.Error == "" || !strings.Contains(r.Error, "failed on purpose") {
				t.Fatalf("unprepare with a failing plugin: %q, want the plugin's error", r.Error)
			}
			if n := pluginCalls(t, calls, "unprepare-failed", first); n != 1 {
				t.Fatalf("the failing unprepare reached the plugin %d times, want once", n)
			}
			wantState, holderState := claimcache.UnprepareStarted, "being unprepared, or its unprepare failed"
			if stateless { // dropped in one commit after the plugin: still Prepared
				wantState, holderState = claimcache.Prepared, "prepared"
			}
			if got, err := a.record.Cache().Get(string(first.UID)); err != nil || got.State != wantState {
				t.Fatalf("after the failed unprepare: %+v, %v; want %s", got, err, wantState)
			}
			refusal(t, k, second, first, "gpu-2", holderState)
			if n := pluginCalls(t, calls, "prepare", second); n != 0 {
				t.Fatalf("the refused claim reached the plugin %d times", n)
			}

			if err := os.Remove(failUnprepare); err != nil {
				t.Fatal(err)
			}
			if r := k.unprepare(t, first)[string(first.UID)]; r.Error != "" {
				t.Fatalf("unprepare retried: %s", r.Error)
			}
			mustPrepared(t, k.prepare(t, second), second)
		})
	}
}

// Claims racing for one device: only one reaches the plugin, also when the
// plugin's Prepare is stateless and nothing is recorded before it is
// called.
func TestConcurrentPreparesOfOneDevice(t *testing.T) {
	e, calls, _ := journalEnv(t, true)
	a := e.start(t, Options{})
	const n = 6
	var claims []*resourcev1.ResourceClaim
	for i := range n {
		c := claim("default", fmt.Sprint("racer-", i), fmt.Sprintf("00000000-0000-0000-0041-00000000002%d", i), "node-a", [2]string{journalDriver, "gpu-3"})
		e.writeClaim(t, c)
		claims = append(claims, c)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = a.Prepare(context.Background(), journalDriver, ClaimRequest{Namespace: c.Namespace, Name: c.Name, UID: string(c.UID)})
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, claimcache.ErrDeviceInUse):
			t.Errorf("claim %d: %v, want success or claimcache.ErrDeviceInUse", i, err)
		}
	}
	reached := 0
	for _, c := range claims {
		reached += pluginCalls(t, calls, "prepare", c)
	}
	if won != 1 || reached != 1 {
		t.Fatalf("%d prepares succeeded and %d reached the plugin, want one each", won, reached)
	}
}

// Shares of one device (allocations with their own share IDs) are
// prepared side by side when the plugin publishes the device with
// allowMultipleAllocations, and refused when it does not; the same share
// ID in two claims is refused either way.
func TestSharesOfOneDevice(t *testing.T) {
	for _, published := range []bool{true, false} {
		t.Run(fmt.Sprint("allowMultipleAllocations=", published), func(t *testing.T) {
			e, _, _ := journalEnv(t, true)
			e.cfg.Plugins.Drivers[0].Config["allowMultipleAllocations"] = published
			a := e.start(t, Options{})
			share := func(name, uid, shareID string) *resourcev1.ResourceClaim {
				c := claim("default", name, uid, "node-a", [2]string{journalDriver, "gpu-1"})
				c.Status.Allocation.Devices.Results[0].ShareID = ptrTo(types.UID(shareID))
				e.writeClaim(t, c)
				return c
			}
			first := share("share-1", "00000000-0000-0000-0041-000000000031", "aaaaaaaa-0000-0000-0000-000000000001")
			second := share("share-2", "00000000-0000-0000-0041-000000000032", "aaaaaaaa-0000-0000-0000-000000000002")
			again := share("share-1-again", "00000000-0000-0000-0041-000000000033", "aaaaaaaa-0000-0000-0000-000000000001")
			k := connectKubelet(t, e.cfg, journalDriver)
			waitFor(t, "the plugin's inventory", func() bool {
				return a.published(journalDriver, "pool-a", "gpu-1").AllowMultipleAllocations == published
			})
			mustPrepared(t, k.prepare(t, first), first)
			if published {
				mustPrepared(t, k.prepare(t, second), second)
			} else {
				refusal(t, k, second, first, "gpu-1", "prepared")
			}
			refusal(t, k, again, first, "gpu-1", "prepared")
		})
	}
}
