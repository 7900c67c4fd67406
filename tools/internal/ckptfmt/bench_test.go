package ckptfmt

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dranode/dranode/claimcache"
)

// benchRecord writes a claim record of n prepared claims with claimcache,
// the largest file dranodectl reads on a busy node.
func benchRecord(tb testing.TB, n int) string {
	tb.Helper()
	dir := tb.TempDir()
	c, _, err := claimcache.Open(dir, "boot")
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		uid := fmt.Sprintf("uid-%06d", i)
		if _, err := c.StartPrepare(claimcache.ClaimRef{Namespace: "ns", Name: "claim-" + uid, UID: uid}, "pod-"+uid); err != nil {
			tb.Fatal(err)
		}
		if _, err := c.FinishPrepare(uid, map[string][]claimcache.Device{"gpu.example.com": {{Pool: "node", Device: "gpu-0", CDIDeviceIDs: []string{"example.com/gpu=" + uid}}}}); err != nil {
			tb.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// bigLog writes a valid claim record whose only log is at least size bytes:
// the records claimcache wrote for 1000 claims, repeated (the same claims
// prepared again and again), as a log looks that compaction never shrank.
func bigLog(tb testing.TB, size int64) string {
	tb.Helper()
	src, err := os.ReadFile(filepath.Join(benchRecord(tb, 1000), "log.1"))
	if err != nil {
		tb.Fatal(err)
	}
	hdrEnd := magicLen + frameHdrLen + int(binary.LittleEndian.Uint32(src[magicLen:]))
	dir := tb.TempDir()
	f, err := os.Create(filepath.Join(dir, "log.1"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	written, err := f.Write(src)
	for int64(written) < size && err == nil {
		var n int
		n, err = f.Write(src[hdrEnd:])
		written += n
	}
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

func BenchmarkParseLog1000Claims(b *testing.B) {
	dir := benchRecord(b, 1000)
	data, err := os.ReadFile(filepath.Join(dir, "log.1"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadJournal1000Claims(b *testing.B) {
	dir := benchRecord(b, 1000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadJournal(context.Background(), dir); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadJournal50MB replays a 50 MB log: what inspect and verify do
// with a claim record that went wrong. B/op is what the replay allocates; it
// stays near the live state's size, not the log's.
func BenchmarkReadJournal50MB(b *testing.B) {
	dir := bigLog(b, 50<<20)
	st, err := os.Stat(filepath.Join(dir, "log.1"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(st.Size())
	b.ReportAllocs()
	for b.Loop() {
		j, err := ReadJournal(context.Background(), dir)
		if err != nil {
			b.Fatal(err)
		}
		if len(j.State) != 1000 {
			b.Fatalf("replayed %d claims, want 1000", len(j.State))
		}
	}
}
