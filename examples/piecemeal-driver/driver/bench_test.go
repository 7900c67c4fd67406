package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/dranode/dranode/claimcache"
)

// heldClaims are the numbers of claims already prepared on the node while
// one more is prepared and unprepared; heldDriverClaims the same for the
// whole driver, which has one GPU per claim and at most MaxDevices GPUs.
var (
	heldClaims       = []int{0, 50, 500}
	heldDriverClaims = []int{0, 50, MaxDevices - 1}
)

// One claim prepared and unprepared through the Driver, as the helper
// calls it: the record (four durable changes) and the CDI spec (a durable
// write and a removal).
func BenchmarkPrepareUnprepare(b *testing.B) {
	for _, held := range heldDriverClaims {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			cfg := benchConfig(b, held+1)
			// Quiet: log lines would break the benchmark output apart.
			ctx := klog.NewContext(context.Background(), logr.Discard())
			d, err := New(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			for i := range held {
				c := claim(fmt.Sprintf("held-%d", i), fmt.Sprintf("uid-held-%d", i), deviceName(i+1))
				if r, _ := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c}); r[c.UID].Err != nil {
					b.Fatal(r[c.UID].Err)
				}
			}
			c := claim("bench", "uid-bench", "gpu-0")
			obj := []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "bench"}, UID: c.UID}}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if r, _ := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c}); r[c.UID].Err != nil {
					b.Fatal(r[c.UID].Err)
				}
				if r, _ := d.UnprepareResourceClaims(context.Background(), obj); r[c.UID] != nil {
					b.Fatal(r[c.UID])
				}
			}
		})
	}
}

// The record alone, before and after: a hand-written checkpoint (the map of
// prepared claims rewritten whole, durably, once when a claim is prepared
// and once when it is unprepared, the way drivers derived from the upstream
// example do) against claimcache (four durable state changes, each one
// appended record).
func BenchmarkRecord(b *testing.B) {
	devices := func(uid string) []claimcache.Device {
		return []claimcache.Device{{Pool: testNode, Device: "gpu-0", Requests: []string{"gpu"}, CDIDeviceIDs: []string{testDriver + "/claim=" + uid + "-gpu-0"}}}
	}
	for _, held := range heldClaims {
		b.Run(fmt.Sprintf("record=jsonfile/held=%d", held), func(b *testing.B) {
			cp := &jsonCheckpoint{path: filepath.Join(b.TempDir(), "checkpoint.json"), claims: map[string][]claimcache.Device{}}
			for i := range held {
				uid := fmt.Sprintf("uid-held-%d", i)
				cp.claims[uid] = devices(uid)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				cp.claims["uid-bench"] = devices("uid-bench")
				if err := cp.save(); err != nil {
					b.Fatal(err)
				}
				delete(cp.claims, "uid-bench")
				if err := cp.save(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("record=claimcache/held=%d", held), func(b *testing.B) {
			record, _, err := claimcache.Open(b.TempDir(), "boot-1")
			if err != nil {
				b.Fatal(err)
			}
			defer record.Close()
			for i := range held {
				uid := fmt.Sprintf("uid-held-%d", i)
				if _, err := record.StartPrepare(claimcache.ClaimRef{Namespace: "ns", Name: "held-" + uid, UID: uid}, ""); err != nil {
					b.Fatal(err)
				}
				if _, err := record.FinishPrepare(uid, map[string][]claimcache.Device{testDriver: devices(uid)}); err != nil {
					b.Fatal(err)
				}
			}
			ref := claimcache.ClaimRef{Namespace: "ns", Name: "bench", UID: "uid-bench"}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := record.StartPrepare(ref, ""); err != nil {
					b.Fatal(err)
				}
				if _, err := record.FinishPrepare(ref.UID, map[string][]claimcache.Device{testDriver: devices(ref.UID)}); err != nil {
					b.Fatal(err)
				}
				if _, err := record.StartUnprepare(ref.UID); err != nil {
					b.Fatal(err)
				}
				if err := record.Remove(ref.UID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// jsonCheckpoint is the "before" of BenchmarkRecord: every save marshals
// all claims and replaces the file durably (temporary file, fsync, rename,
// fsync of the directory), as careful hand-written checkpoints do.
type jsonCheckpoint struct {
	path   string
	claims map[string][]claimcache.Device
}

func (c *jsonCheckpoint) save() error {
	data, err := json.Marshal(map[string]any{"v1": map[string]any{"preparedClaims": c.claims}})
	if err != nil {
		return err
	}
	tmp := c.path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, c.path); err != nil {
		return err
	}
	dir, err := os.Open(filepath.Dir(c.path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

func benchConfig(b *testing.B, devices int) Config {
	root := b.TempDir()
	return Config{
		DriverName: testDriver, NodeName: testNode, NumDevices: min(devices, MaxDevices),
		DevRoot: filepath.Join(root, "dev"), CDIDir: filepath.Join(root, "cdi"),
		StateDir: filepath.Join(root, "state"), BootID: "boot-1",
	}
}
