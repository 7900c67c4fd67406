package ckptfmt

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dranode/dranode/claimcache"
)

// benchRecord writes a claim record of n prepared claims with claimcache,
// the largest file dranodectl reads on a busy node.
func benchRecord(b *testing.B, n int) string {
	b.Helper()
	dir := b.TempDir()
	c, _, err := claimcache.Open(dir, "boot")
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		uid := fmt.Sprintf("uid-%06d", i)
		if _, err := c.StartPrepare(claimcache.ClaimRef{Namespace: "ns", Name: "claim-" + uid, UID: uid}, "pod-"+uid); err != nil {
			b.Fatal(err)
		}
		if _, err := c.FinishPrepare(uid, map[string][]claimcache.Device{"gpu.example.com": {{Pool: "node", Device: "gpu-0", CDIDeviceIDs: []string{"example.com/gpu=" + uid}}}}); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		b.Fatal(err)
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
		if _, err := ReadJournal(dir); err != nil {
			b.Fatal(err)
		}
	}
}
