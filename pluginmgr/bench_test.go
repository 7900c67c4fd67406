package pluginmgr_test

import (
	"context"
	"testing"

	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/pluginmgr/internal/testdriver"
)

// BenchmarkStartup measures launch to first inventory: checksum, process
// start, go-plugin handshake with AutoMTLS, Configure, Info and the first
// WatchDevices message, then a clean Close (not timed).
func BenchmarkStartup(b *testing.B) {
	cfg := testConfig(b, nil)
	b.ReportAllocs()
	for b.Loop() {
		p, err := pluginmgr.Launch(context.Background(), cfg, quietOptions())
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := p.WaitInventory(context.Background(), 0); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := p.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkPrepare compares a one-claim Prepare through the host, go-plugin
// and the plugin process with the same driver called in-process; the
// difference is the protocol's overhead.
func BenchmarkPrepare(b *testing.B) {
	claims := []pluginmgr.Claim{claimFor("bench", "dev0")}
	ctx := context.Background()
	b.Run("plugin", func(b *testing.B) {
		p := launch(b, testConfig(b, nil), quietOptions())
		b.ReportAllocs()
		for b.Loop() {
			res, err := p.Prepare(ctx, claims)
			if err != nil || res[0].Err != nil {
				b.Fatal(err, res)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		d := &testdriver.Driver{}
		if err := d.Configure(ctx, "node-1", nil); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			res, err := d.Prepare(ctx, claims)
			if err != nil || res[0].Err != nil {
				b.Fatal(err, res)
			}
		}
	})
}
