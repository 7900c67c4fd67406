package kubelet

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/dranode/dranode/checkpoint"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	drastate "k8s.io/kubernetes/pkg/kubelet/cm/dra/state"
)

// The benchmarks compare the kubelet's DRA checkpointer with the dranode
// checkpoint journal on the same records: the journal's value type is the
// kubelet's own ClaimInfoState, so both sides store the same information
// per claim.

var claimCounts = []int{10, 1000, 10000}

// benchSchema is the journal's identity in these benchmarks.
var benchSchema = checkpoint.Schema{Kind: "dranode.io/bench-claims", Version: 1}

// benchClaim is one prepared claim of typical shape: one pod, one driver,
// two devices, each with a claim-specific and a common CDI device.
func benchClaim(i, version int) drastate.ClaimInfoState {
	uid := fmt.Sprintf("%08x-1111-4222-8333-%012x", i, i)
	dev := func(d int) drastate.Device {
		return drastate.Device{
			PoolName:     "node-a",
			DeviceName:   fmt.Sprintf("gpu-%d", (2*i+d)%8),
			RequestNames: []string{"gpus"},
			CDIDeviceIDs: []string{fmt.Sprintf("example.com/gpu=claim-%s-gpu-%d-v%d", uid, d, version), "example.com/gpu=common"},
		}
	}
	return drastate.ClaimInfoState{
		ClaimUID:    types.UID(uid),
		ClaimName:   fmt.Sprintf("pod-%d-gpus-x7k2q", i),
		Namespace:   "team-a",
		PodUIDs:     sets.New(fmt.Sprintf("%08x-aaaa-4bbb-8ccc-%012x", i, i)),
		DriverState: map[string]drastate.DriverState{"gpu.example.com": {Devices: []drastate.Device{dev(0), dev(1)}}},
	}
}

func benchClaims(n int) drastate.ClaimInfoStateList {
	list := make(drastate.ClaimInfoStateList, n)
	for i := range list {
		list[i] = benchClaim(i, 0)
	}
	return list
}

// kubeletStore writes the whole list as the kubelet's DRA manager does after
// every change: a fresh checkpoint of the whole state, stored atomically.
func kubeletStore(b *testing.B, cp drastate.Checkpointer, list drastate.ClaimInfoStateList) {
	data, err := drastate.NewCheckpoint(list)
	if err != nil {
		b.Fatal(err)
	}
	if err := cp.Store(data); err != nil {
		b.Fatal(err)
	}
}

func openBenchJournal(b *testing.B, dir string) *checkpoint.Journal[drastate.ClaimInfoState] {
	j, err := checkpoint.OpenJournal[drastate.ClaimInfoState](dir, benchSchema)
	if err != nil {
		b.Fatal(err)
	}
	return j
}

// fillJournal records n claims in one batch.
func fillJournal(b *testing.B, j *checkpoint.Journal[drastate.ClaimInfoState], n int) {
	changes := make([]checkpoint.Change[drastate.ClaimInfoState], n)
	for i := range changes {
		c := benchClaim(i, 0)
		changes[i] = checkpoint.Change[drastate.ClaimInfoState]{Key: string(c.ClaimUID), Value: c}
	}
	if err := j.Commit(changes...); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkChange makes one claim's change durable with N claims recorded.
func BenchmarkChange(b *testing.B) {
	for _, n := range claimCounts {
		b.Run(fmt.Sprintf("impl=kubelet/claims=%d", n), func(b *testing.B) {
			cp, err := drastate.NewCheckpointer(b.TempDir(), "dra_manager_state")
			if err != nil {
				b.Fatal(err)
			}
			list := benchClaims(n)
			kubeletStore(b, cp, list)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				k := i % n
				list[k] = benchClaim(k, i+1)
				kubeletStore(b, cp, list)
			}
		})
	}
	for _, n := range claimCounts {
		b.Run(fmt.Sprintf("impl=dranode/claims=%d", n), func(b *testing.B) {
			j := openBenchJournal(b, b.TempDir())
			defer j.Close()
			fillJournal(b, j, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				c := benchClaim(i%n, i+1)
				if err := j.Put(string(c.ClaimUID), c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoad restores N claims from disk, as an agent or kubelet does when
// it starts.
func BenchmarkLoad(b *testing.B) {
	for _, n := range claimCounts {
		b.Run(fmt.Sprintf("impl=kubelet/claims=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			cp, err := drastate.NewCheckpointer(dir, "dra_manager_state")
			if err != nil {
				b.Fatal(err)
			}
			kubeletStore(b, cp, benchClaims(n))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				cp, err := drastate.NewCheckpointer(dir, "dra_manager_state")
				if err != nil {
					b.Fatal(err)
				}
				data, err := cp.GetOrCreate()
				if err != nil {
					b.Fatal(err)
				}
				list, err := data.GetClaimInfoStateList()
				if err != nil || len(list) != n {
					b.Fatalf("loaded %d claims, %v", len(list), err)
				}
			}
		})
	}
	for _, n := range claimCounts {
		b.Run(fmt.Sprintf("impl=dranode/claims=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			j := openBenchJournal(b, dir)
			fillJournal(b, j, n)
			if err := j.Close(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				j := openBenchJournal(b, dir)
				if got := len(j.Snapshot()); got != n {
					b.Fatalf("loaded %d claims, want %d", got, n)
				}
				if err := j.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFloor is the least any durable replace-a-file commit costs on this
// disk: write 4 KiB to a temporary file, fsync it, rename it over the target,
// fsync the directory.
func BenchmarkFloor(b *testing.B) {
	dir := b.TempDir()
	target := filepath.Join(dir, "state")
	page := make([]byte, 4096)
	b.ReportAllocs()
	for b.Loop() {
		f, err := os.CreateTemp(dir, ".state-")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.Write(page); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(f.Name(), target); err != nil {
			b.Fatal(err)
		}
		d, err := os.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.Sync(); err != nil {
			b.Fatal(err)
		}
		d.Close()
	}
}

// BenchmarkConcurrentWriters64 has 64 goroutines each make one claim's change
// durable at the same time, with 1,000 claims recorded, and reports how many
// fsyncs the journal needed per round of 64: group commit should share them.
func BenchmarkConcurrentWriters64(b *testing.B) {
	const writers, recorded = 64, 1000
	j := openBenchJournal(b, b.TempDir())
	defer j.Close()
	fillJournal(b, j, recorded)
	before := j.Fsyncs()
	var rounds int
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rounds++
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		start := make(chan struct{})
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				c := benchClaim((rounds*writers+w)%recorded, rounds)
				errs <- j.Put(string(c.ClaimUID), c)
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(j.Fsyncs()-before)/float64(rounds), "fsyncs/64writers")
}
