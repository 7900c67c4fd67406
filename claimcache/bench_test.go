package claimcache

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func benchDevices(uid string) map[string][]Device {
	return map[string][]Device{"gpu.example.com": {{Pool: "node-a", Device: "gpu-" + uid, Requests: []string{"gpu"}, CDIDeviceIDs: []string{"example.com/gpu=" + uid}}}}
}

// prepareClaims takes claims [from, to) through StartPrepare and
// FinishPrepare with the given number of goroutines.
func prepareClaims(tb testing.TB, c *Cache, from, to, writers int) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range writers {
		wg.Go(func() {
			for i := range next {
				ref := ClaimRef{Namespace: "bench", Name: fmt.Sprint("claim-", i), UID: fmt.Sprint("uid-", i)}
				if _, err := c.StartPrepare(ref, "pod"); err != nil {
					tb.Error(err)
					continue
				}
				if _, err := c.FinishPrepare(ref.UID, benchDevices(ref.UID)); err != nil {
					tb.Error(err)
				}
			}
		})
	}
	for i := from; i < to; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

// BenchmarkPrepare1000: one op is 1,000 claims taken through PrepareStarted
// and Prepared (two durable changes each) by 1 or 64 goroutines.
func BenchmarkPrepare1000(b *testing.B) {
	const claims = 1000
	for _, writers := range []int{1, 64} {
		b.Run(fmt.Sprint("writers=", writers), func(b *testing.B) {
			b.ReportAllocs()
			var fsyncs uint64
			for b.Loop() {
				b.StopTimer()
				c, _ := openT(b, b.TempDir(), bootOne)
				before := c.Fsyncs()
				b.StartTimer()
				prepareClaims(b, c, 0, claims, writers)
				b.StopTimer()
				fsyncs += c.Fsyncs() - before
				c.Close()
				b.StartTimer()
			}
			total := float64(claims * b.N)
			b.ReportMetric(total/b.Elapsed().Seconds(), "claims/s")
			b.ReportMetric(float64(fsyncs)/total, "fsyncs/claim")
		})
	}
}

// BenchmarkPrepare1000Paired measures the single writer and the 64 writers
// back to back in every op and reports the ratio of their rates, so that
// load from other processes on a shared machine hits both sides alike.
func BenchmarkPrepare1000Paired(b *testing.B) {
	const claims = 1000
	var single, parallel time.Duration
	for b.Loop() {
		for _, writers := range []int{1, 64} {
			b.StopTimer()
			c, _ := openT(b, b.TempDir(), bootOne)
			b.StartTimer()
			start := time.Now()
			prepareClaims(b, c, 0, claims, writers)
			if writers == 1 {
				single += time.Since(start)
			} else {
				parallel += time.Since(start)
			}
			b.StopTimer()
			c.Close()
			b.StartTimer()
		}
	}
	b.ReportMetric(single.Seconds()/parallel.Seconds(), "speedup-x")
	b.ReportMetric(float64(claims*b.N)/single.Seconds(), "single-claims/s")
	b.ReportMetric(float64(claims*b.N)/parallel.Seconds(), "64-writers-claims/s")
}

// BenchmarkTransition: one op is one durable transition of one claim
// (cycling StartPrepare, FinishPrepare, StartUnprepare, Remove) while 10 or
// 10,000 other claims are recorded.
func BenchmarkTransition(b *testing.B) {
	for _, recorded := range []int{10, 10000} {
		b.Run(fmt.Sprint("recorded=", recorded), func(b *testing.B) {
			c, _ := openT(b, b.TempDir(), bootOne)
			defer c.Close()
			prepareClaims(b, c, 0, recorded, 64)
			ref := ClaimRef{Namespace: "bench", Name: "cycling", UID: "uid-cycling"}
			devs := benchDevices(ref.UID)
			steps := []func() error{
				func() error { _, err := c.StartPrepare(ref, "pod"); return err },
				func() error { _, err := c.FinishPrepare(ref.UID, devs); return err },
				func() error { _, err := c.StartUnprepare(ref.UID); return err },
				func() error { return c.Remove(ref.UID) },
			}
			before := c.Fsyncs()
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				if err := steps[i%len(steps)](); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(c.Fsyncs()-before)/float64(b.N), "fsyncs/op")
		})
	}
}
