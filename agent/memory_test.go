package agent

import (
	"errors"
	"io"
	"math"
	"net/http"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/dranode/dranode/agent/config"
)

func TestMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	tests := []struct {
		limit   string
		want    int64 // the limit in effect afterwards; -1: unchanged
		wantErr string
	}{
		{limit: config.DefaultMemoryLimit, want: 32 << 20},
		{limit: "64Mi", want: 64 << 20},
		{limit: "100M", want: 100_000_000},
		{limit: "0", want: -1},
		{limit: "", want: -1},
		{limit: "15Mi", wantErr: "below the minimum of 16Mi"},
		{limit: "-64Mi", wantErr: "not a byte count"},
		{limit: "lots", wantErr: "not a quantity"},
	}
	for _, tt := range tests {
		t.Run(tt.limit, func(t *testing.T) {
			debug.SetMemoryLimit(math.MaxInt64)
			cfg := config.Default()
			cfg.MemoryLimit = tt.limit
			got, err := ApplyMemoryLimit(cfg)
			if tt.wantErr != "" {
				if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "memoryLimit") {
					t.Fatalf("error %v, want a memoryLimit config.Error with %q", err, tt.wantErr)
				}
				if now := debug.SetMemoryLimit(-1); now != math.MaxInt64 {
					t.Errorf("a refused limit changed the runtime's to %d", now)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if want == -1 {
				want = math.MaxInt64
			}
			if now := debug.SetMemoryLimit(-1); now != want || got != want {
				t.Errorf("limit in effect %d (returned %d), want %d", now, got, want)
			}
		})
	}
}

func TestPprofOnlyWhenEnabled(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		e := newTestEnv(t, gpuDriver)
		e.cfg.HTTP.Pprof = enabled
		a := e.start(t, Options{})
		resp, err := http.Get("http://" + a.HTTPAddr() + "/debug/pprof/heap?debug=1")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		served := resp.StatusCode == http.StatusOK && strings.Contains(string(body), "HeapInuse")
		if served != enabled {
			t.Errorf("http.pprof %v: /debug/pprof/heap answered %d (heap profile: %v)", enabled, resp.StatusCode, served)
		}
	}
}
