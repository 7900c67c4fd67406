package claimcache_test

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/dranode/dranode/checkpoint"
	"github.com/dranode/dranode/claimcache"
)

// The agent's Prepare and Unprepare calls, answered from the record.
func Example() {
	dir, _ := os.MkdirTemp("", "claimcache-example")
	defer os.RemoveAll(dir)
	cache, _, err := claimcache.Open(dir, "boot-1") // in an agent: claimcache.ReadBootID()
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()

	claim := claimcache.ClaimRef{Namespace: "ml", Name: "gpus", UID: "7f3c"}
	prepare := func(pod string) []string {
		if e, err := cache.Lookup(claim); err == nil && e.PreparedInCurrentBoot() {
			if _, err := cache.AddPod(claim.UID, pod); err != nil {
				log.Fatal(err)
			}
			return e.CDIDeviceIDs("gpu.example.com") // no driver call
		}
		if _, err := cache.StartPrepare(claim, pod); err != nil {
			log.Fatal(err)
		}
		// ... the driver prepares the devices ...
		e, err := cache.FinishPrepare(claim.UID, map[string][]claimcache.Device{
			"gpu.example.com": {{Pool: "node-a", Device: "gpu-0", Requests: []string{"gpu"}, CDIDeviceIDs: []string{"example.com/gpu=gpu-0"}}},
		})
		if err != nil {
			log.Fatal(err)
		}
		return e.CDIDeviceIDs("gpu.example.com")
	}
	fmt.Println(prepare("pod-1"))
	fmt.Println(prepare("pod-2"))

	// Unprepare needs nothing but the UID: the record says what to undo.
	e, err := cache.StartUnprepare(claim.UID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("unprepare", e.Drivers["gpu.example.com"][0].Device, "used by", e.PodUIDs)
	// ... the driver unprepares the devices ...
	if err := cache.Remove(claim.UID); err != nil {
		log.Fatal(err)
	}
	_, err = cache.StartUnprepare(claim.UID)
	fmt.Println("again:", errors.Is(err, claimcache.ErrNotFound))
	// Output:
	// [example.com/gpu=gpu-0]
	// [example.com/gpu=gpu-0]
	// unprepare gpu-0 used by [pod-1 pod-2]
	// again: true
}

// After a reboot nothing counts as prepared, but what is needed to
// unprepare is still there, and a crash's leftovers are reported.
func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "claimcache-example")
	defer os.RemoveAll(dir)
	cache, _, _ := claimcache.Open(dir, "boot-1")
	done := claimcache.ClaimRef{Namespace: "ns", Name: "done", UID: "u1"}
	halfway := claimcache.ClaimRef{Namespace: "ns", Name: "halfway", UID: "u2"}
	cache.StartPrepare(done, "pod")
	cache.FinishPrepare(done.UID, map[string][]claimcache.Device{"nic.example.com": {{Pool: "p", Device: "eth1"}}})
	cache.StartPrepare(halfway, "pod") // and the agent dies here
	cache.Close()

	cache, report, err := claimcache.Open(dir, "boot-2")
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()
	fmt.Println("reboot detected:", report.RebootDetected)
	for _, e := range report.Interrupted {
		fmt.Println("interrupted:", e.Claim.Name, e.State)
	}
	for _, e := range report.NoLongerPrepared {
		fmt.Println("no longer prepared:", e.Claim.Name, e.Drivers["nic.example.com"][0].Device)
	}
	e, err := cache.StartPrepare(done, "pod") // allowed again: prepare anew
	fmt.Println(e.State, e.BootID, err)
	// Output:
	// reboot detected: true
	// interrupted: halfway PrepareStarted
	// no longer prepared: done eth1
	// PrepareStarted boot-2 <nil>
}

// A pod was force-deleted and its claim recreated under the same name before
// the old one was unprepared.
func ExampleUIDMismatchError() {
	dir, _ := os.MkdirTemp("", "claimcache-example")
	defer os.RemoveAll(dir)
	cache, _, _ := claimcache.Open(dir, "boot-1")
	defer cache.Close()
	cache.StartPrepare(claimcache.ClaimRef{Namespace: "ns", Name: "db", UID: "old"}, "pod-a")

	_, err := cache.StartPrepare(claimcache.ClaimRef{Namespace: "ns", Name: "db", UID: "new"}, "pod-b")
	var mismatch *claimcache.UIDMismatchError
	if errors.As(err, &mismatch) {
		fmt.Println("unprepare", mismatch.RecordedUID, "first")
	}
	// Output: unprepare old first
}

// Finding the entries of claims deleted while the agent was not looking.
func ExampleCache_Gone() {
	dir, _ := os.MkdirTemp("", "claimcache-example")
	defer os.RemoveAll(dir)
	cache, _, _ := claimcache.Open(dir, "boot-1")
	defer cache.Close()
	for _, uid := range []string{"u1", "u2", "u3"} {
		cache.StartPrepare(claimcache.ClaimRef{Namespace: "ns", Name: "claim-" + uid, UID: uid}, "")
	}
	inAPIServer := map[string]bool{"u2": true}
	gone, err := cache.Gone(func(ref claimcache.ClaimRef) (bool, error) { return inAPIServer[ref.UID], nil })
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range gone {
		fmt.Println(e.Claim.UID, "is gone")
	}
	// Output:
	// u1 is gone
	// u3 is gone
}

// A kubelet may send Prepare and Unprepare of one claim at the same time;
// WithClaim keeps each caller's steps together. Claims of other UIDs are
// not held up.
func ExampleCache_WithClaim() {
	dir, _ := os.MkdirTemp("", "claimcache-example")
	defer os.RemoveAll(dir)
	cache, _, err := claimcache.Open(dir, "boot-1")
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()

	claim := claimcache.ClaimRef{Namespace: "ml", Name: "gpus", UID: "7f3c"}
	err = cache.WithClaim(claim.UID, func() error {
		// The Cache's methods may be called here; WithClaim on claim.UID
		// may not.
		if _, err := cache.StartPrepare(claim, "pod-1"); err != nil {
			return err
		}
		// ... the driver prepares the devices ...
		_, err := cache.FinishPrepare(claim.UID, map[string][]claimcache.Device{
			"gpu.example.com": {{Pool: "node-a", Device: "gpu-0", CDIDeviceIDs: []string{"example.com/gpu=gpu-0"}}},
		})
		return err
	})
	fmt.Println("prepare:", err)

	errBusy := errors.New("device busy")
	err = cache.WithClaim(claim.UID, func() error {
		if _, err := cache.StartUnprepare(claim.UID); err != nil {
			return err
		}
		return errBusy // the driver failed: the entry stays UnprepareStarted
	})
	e, _ := cache.Get(claim.UID)
	fmt.Println("unprepare:", errors.Is(err, errBusy), e.State)
	// Output:
	// prepare: <nil>
	// unprepare: true UnprepareStarted
}

// A byte flipped in the record: what was stored before it is restored, and
// the claims the damage may have touched are uncertain entries for the
// caller to reconcile with the kubelet's checkpoint and the API server,
// never forgotten.
func ExampleOpen_damage() {
	dir, _ := os.MkdirTemp("", "claimcache-damage")
	defer os.RemoveAll(dir)
	cache, _, err := claimcache.Open(dir, "boot-1")
	if err != nil {
		log.Fatal(err)
	}
	a := claimcache.ClaimRef{Namespace: "ml", Name: "a", UID: "uid-a"}
	cache.StartPrepare(a, "pod-1")
	cache.FinishPrepare(a.UID, map[string][]claimcache.Device{"gpu.example.com": {{Pool: "node-a", Device: "gpu-0"}}})
	cache.StartPrepare(claimcache.ClaimRef{Namespace: "ml", Name: "b", UID: "uid-b"}, "pod-2")
	cache.StartPrepare(claimcache.ClaimRef{Namespace: "ml", Name: "c", UID: "uid-c"}, "pod-3")
	cache.Close()

	// Flip a byte in claim b's record.
	logs, _ := filepath.Glob(filepath.Join(dir, "log.*"))
	data, _ := os.ReadFile(logs[0])
	data[bytes.Index(data, []byte(`"uid-b"`))+2] ^= 1
	os.WriteFile(logs[0], data, 0o600)

	if _, _, err := claimcache.Open(dir, "boot-1"); errors.Is(err, checkpoint.ErrCorrupt) {
		fmt.Println("by default: refused")
	}
	cache, report, err := claimcache.Open(dir, "boot-1",
		claimcache.WithJournalOptions(checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside)))
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()
	d := report.Damage
	fmt.Println("kept records:", d.KeptRecords, "unreadable changes:", d.Unknown)
	for _, u := range d.Uncertain {
		fmt.Printf("uncertain %s (%s): last seen %s\n", u.Claim.Name, u.Claim.UID, u.LastSeen)
	}
	for _, e := range report.Uncertain {
		fmt.Println(e.Claim.Name, e.State, len(e.Drivers["gpu.example.com"]), "device(s)")
	}
	// Claim b is named by nothing readable: the caller finds it in the
	// kubelet's checkpoint and calls RecordUncertain with its devices.
	// Output:
	// by default: refused
	// kept records: 2 unreadable changes: true
	// uncertain a (uid-a): last seen restored; changes after the damage could not be read
	// uncertain c (uid-c): last seen PrepareStarted
	// a PrepareStarted 1 device(s)
	// c PrepareStarted 0 device(s)
}

// A driver's prepare holds the devices the claim's allocation names before
// it touches them: a device another claim still holds is refused, naming
// that claim, until it is unprepared.
func ExampleCache_Hold() {
	dir, _ := os.MkdirTemp("", "claimcache-example")
	defer os.RemoveAll(dir)
	cache, _, err := claimcache.Open(dir, "boot-1")
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()
	gpu0 := map[string][]claimcache.Device{"gpu.example.com": {{Pool: "node-a", Device: "gpu-0", Requests: []string{"gpu"}}}}
	// published: how the driver publishes a device in its latest inventory
	// (allowMultipleAllocations, the counters it consumes).
	published := func(driver, pool, device string) claimcache.PublishedDevice {
		return claimcache.PublishedDevice{Listed: true}
	}

	prepare := func(claim claimcache.ClaimRef) error {
		hold, err := cache.Hold(claim, gpu0, published)
		if err != nil {
			return err // a *claimcache.DeviceInUseError: the kubelet retries
		}
		defer hold.Release() // the record holds the devices from StartPrepare on
		if _, err := cache.StartPrepare(claim, ""); err != nil {
			return err
		}
		// ... the driver prepares the devices ...
		_, err = cache.FinishPrepare(claim.UID, gpu0)
		return err
	}
	old := claimcache.ClaimRef{Namespace: "ml", Name: "old", UID: "1111"}
	next := claimcache.ClaimRef{Namespace: "ml", Name: "next", UID: "2222"}
	if err := prepare(old); err != nil {
		log.Fatal(err)
	}
	err = prepare(next)
	fmt.Println(errors.Is(err, claimcache.ErrDeviceInUse))
	fmt.Println(err)

	// The old claim is unprepared: the kubelet's retry succeeds.
	if _, err := cache.StartUnprepare(old.UID); err != nil {
		log.Fatal(err)
	}
	if err := cache.Remove(old.UID); err != nil {
		log.Fatal(err)
	}
	fmt.Println(prepare(next))
	// Output:
	// true
	// device gpu.example.com/node-a/gpu-0 is in use by claim ml/old (uid 1111, prepared): claim ml/next (uid 2222) gets it once that claim is unprepared
	// <nil>
}
