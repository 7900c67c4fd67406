package cli

import (
	"context"
	"testing"
)

func TestRecorderAndClassify(t *testing.T) {
	tests := []struct {
		name    string
		check   func(testing.TB)
		passed  bool
		results []string // per conformance check, in order, then "other" if any
	}{
		{"clean", func(t testing.TB) { t.Logf("fine") }, true,
			[]string{"passed", "passed", "passed", "passed", "passed", "passed", "passed"}},
		{"error keeps going", func(t testing.TB) {
			t.Errorf("conformance: Info: driver version is empty")
			t.Errorf("conformance: repeated Unprepare (claim x) failed: boom")
		}, false, []string{"failed", "passed", "passed", "passed", "passed", "passed", "failed"}},
		{"fatal stops", func(t testing.TB) {
			t.Fatalf("conformance: no inventory: timeout")
			t.Errorf("conformance: Info: never reached")
		}, false, []string{"passed", "failed", "not run", "not run", "not run", "not run", "not run"}},
		{"unknown claim is its own check", func(t testing.TB) {
			t.Errorf("conformance: Unprepare of a claim never prepared (claim y) failed: no")
		}, false, []string{"passed", "passed", "passed", "passed", "passed", "failed", "passed"}},
		{"admin access and shares are checks of their own", func(t testing.TB) {
			t.Errorf("conformance: Prepare with admin access: device gpu-0: no edits")
			t.Errorf("conformance: the owner's Prepare answered [] after an admin-access claim of its device came and went, [x] before")
			t.Errorf("conformance: Prepare of claim two-shares with 2 shares of node/gpu-2: share A answered 0 times, want once")
			t.Errorf("conformance: Unprepare of a claim with shares (claim z) failed: no")
		}, false, []string{"passed", "passed", "passed", "failed", "failed", "passed", "passed"}},
		{"unplaceable message", func(t testing.TB) { t.Error("something else") }, false,
			[]string{"passed", "passed", "passed", "passed", "passed", "passed", "passed", "failed"}},
		// Nothing says how far the kit got before the panic.
		{"panic", func(testing.TB) { panic("driver bug") }, false,
			[]string{"not run", "not run", "not run", "not run", "not run", "not run", "not run", "failed"}},
		{"cleanup runs", func(t testing.TB) {
			d := t.TempDir()
			t.Cleanup(func() {})
			if d == "" {
				t.Error("no temp dir")
			}
		}, true, []string{"passed", "passed", "passed", "passed", "passed", "passed", "passed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(context.Background(), tt.name)
			rec.run(tt.check)
			results, passed := classify(rec)
			if passed != tt.passed {
				t.Errorf("passed = %v, want %v (%+v)", passed, tt.passed, rec.messages)
			}
			if len(results) != len(tt.results) {
				t.Fatalf("results %+v, want %v", results, tt.results)
			}
			for i, r := range results {
				if r.Result != tt.results[i] {
					t.Errorf("check %q: %s, want %s", r.Check, r.Result, tt.results[i])
				}
			}
		})
	}
}
