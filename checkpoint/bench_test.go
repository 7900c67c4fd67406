package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// benchClaim is shaped like one prepared claim in the kubelet's DRA
// checkpoint (about 600 bytes of JSON), so sizes compare.
type benchClaim struct {
	ClaimUID    string                      `json:"claimUID"`
	ClaimName   string                      `json:"claimName"`
	Namespace   string                      `json:"namespace"`
	PodUIDs     []string                    `json:"podUIDs"`
	DriverState map[string]benchDriverState `json:"driverState"`
}

type benchDriverState struct {
	Devices []benchDevice `json:"devices"`
}

type benchDevice struct {
	PoolName     string   `json:"poolName"`
	DeviceName   string   `json:"deviceName"`
	RequestNames []string `json:"requestNames"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
}

func makeBenchClaim(i int) benchClaim {
	uid := fmt.Sprintf("a1b2c3d4-0000-4000-8000-%012d", i)
	return benchClaim{
		ClaimUID:  uid,
		ClaimName: fmt.Sprintf("pod-%d-gpu-claim", i),
		Namespace: "team-ml-training",
		PodUIDs:   []string{fmt.Sprintf("f0e1d2c3-0000-4000-8000-%012d", i)},
		DriverState: map[string]benchDriverState{"gpu.example.com": {Devices: []benchDevice{
			{PoolName: "node-worker-17", DeviceName: fmt.Sprintf("gpu-%d", i%8), RequestNames: []string{"gpu"},
				CDIDeviceIDs: []string{"gpu.example.com/gpu=gpu-" + fmt.Sprint(i%8), "gpu.example.com/claim=" + uid}},
			{PoolName: "node-worker-17", DeviceName: fmt.Sprintf("nic-%d", i%4), RequestNames: []string{"nic"},
				CDIDeviceIDs: []string{"gpu.example.com/nic=nic-" + fmt.Sprint(i%4), "gpu.example.com/claim=" + uid + "-nic"}},
		}}},
	}
}

var benchSchema = Schema{Kind: "dranode.io/bench-claims", Version: 1}

// BenchmarkFloor is the cheapest durable replace of a small file: write 4
// KiB to a temporary file, fsync, rename, fsync the directory.
func BenchmarkFloor(b *testing.B) {
	b.ReportAllocs()
	dir := b.TempDir()
	data := make([]byte, 4096)
	var fsyncs atomic.Uint64
	for b.Loop() {
		if err := writeFile(filepath.Join(dir, "floor"), data, &fsyncs); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFileSave(b *testing.B) {
	for _, n := range []int{1, 100, 10000} {
		b.Run(fmt.Sprintf("claims=%d", n), func(b *testing.B) {
			state := make(map[string]benchClaim, n)
			for i := range n {
				c := makeBenchClaim(i)
				state[c.ClaimUID] = c
			}
			f, err := OpenFile[map[string]benchClaim](filepath.Join(b.TempDir(), "state"), benchSchema)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			b.ReportAllocs()
			for b.Loop() {
				if err := f.Save(state); err != nil {
					b.Fatal(err)
				}
			}
			st, _ := os.Stat(f.Path())
			b.ReportMetric(float64(st.Size()), "file-bytes")
		})
	}
}

func BenchmarkFileLoad(b *testing.B) {
	const n = 10000
	state := make(map[string]benchClaim, n)
	for i := range n {
		c := makeBenchClaim(i)
		state[c.ClaimUID] = c
	}
	f, err := OpenFile[map[string]benchClaim](filepath.Join(b.TempDir(), "state"), benchSchema)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Save(state); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.Load(); err != nil {
			b.Fatal(err)
		}
	}
}

// fillJournal puts n claims in batches and returns their keys.
func fillJournal(b *testing.B, j *Journal[benchClaim], n int) []string {
	keys := make([]string, 0, n)
	var batch []Change[benchClaim]
	for i := range n {
		c := makeBenchClaim(i)
		keys = append(keys, c.ClaimUID)
		batch = append(batch, Change[benchClaim]{Key: c.ClaimUID, Value: c})
		if len(batch) == 500 || i == n-1 {
			if err := j.Commit(batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	return keys
}

// BenchmarkJournalPut is one claim's change with n claims recorded: the
// cost the kubelet pays by rewriting its whole checkpoint. Compaction runs
// as configured by default, so its amortized cost is included.
func BenchmarkJournalPut(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("claims=%d", n), func(b *testing.B) {
			j, err := OpenJournal[benchClaim](b.TempDir(), benchSchema)
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			keys := fillJournal(b, j, n)
			c := makeBenchClaim(0)
			before := j.Fsyncs()
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				c.ClaimUID = keys[i%len(keys)]
				c.PodUIDs[0] = fmt.Sprint(i)
				if err := j.Put(c.ClaimUID, c); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(j.Fsyncs()-before)/float64(i), "fsyncs/op")
		})
	}
}

// BenchmarkJournalConcurrent64: one op is 64 goroutines each committing one
// change at the same moment; fsyncs/op is how many fsyncs they shared.
func BenchmarkJournalConcurrent64(b *testing.B) {
	j, err := OpenJournal[benchClaim](b.TempDir(), benchSchema)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	keys := fillJournal(b, j, 10000)
	before := j.Fsyncs()
	ops := 0
	b.ReportAllocs()
	for b.Loop() {
		var wg, ready sync.WaitGroup
		start := make(chan struct{})
		for w := range 64 {
			ready.Add(1)
			wg.Go(func() {
				c := makeBenchClaim(w)
				c.ClaimUID = keys[(ops*64+w)%len(keys)]
				ready.Done()
				<-start
				if err := j.Put(c.ClaimUID, c); err != nil {
					b.Error(err)
				}
			})
		}
		ready.Wait()
		close(start)
		wg.Wait()
		ops++
	}
	b.ReportMetric(float64(j.Fsyncs()-before)/float64(ops), "fsyncs/op")
}

// BenchmarkJournalOpen is a full load of 10,000 claims: a snapshot plus a
// log of later changes, restored and handed out as a map.
func BenchmarkJournalOpen(b *testing.B) {
	for _, layout := range []string{"snapshot+log", "log-only"} {
		b.Run(layout+"/claims=10000", func(b *testing.B) {
			dir := b.TempDir()
			j, err := OpenJournal[benchClaim](dir, benchSchema, WithCompaction(1<<40, 1))
			if err != nil {
				b.Fatal(err)
			}
			keys := fillJournal(b, j, 10000)
			if layout == "snapshot+log" {
				j.mu.Lock()
				gen, entries, err := j.rotateLocked()
				j.mu.Unlock()
				if err != nil {
					b.Fatal(err)
				}
				if err := j.writeSnapshot(gen, entries); err != nil {
					b.Fatal(err)
				}
				for i := range 500 {
					c := makeBenchClaim(i)
					if err := j.Put(keys[i*7%len(keys)], c); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := j.Close(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				j, err := OpenJournal[benchClaim](dir, benchSchema)
				if err != nil {
					b.Fatal(err)
				}
				if len(j.Snapshot()) != 10000 {
					b.Fatal("lost claims")
				}
				j.Close()
			}
		})
	}
}
