package envtest

import (
	"sort"
	"testing"

	"k8s.io/client-go/rest"
)

// StartT starts e for a test: it stops e in t.Cleanup, prints the tails of
// the component logs when the test has failed (before they are removed),
// and fails the test at once with the reason when e cannot start — missing
// binaries included, so a test that needs the control plane never passes
// by not running.
func StartT(t testing.TB, e *Environment) *rest.Config {
	t.Helper()
	cfg, err := e.Start()
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	// Cleanups run last-in first-out: this one sees the logs before Stop
	// removes them.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		tails := e.LogTails(40)
		names := make([]string, 0, len(tails))
		for name := range tails {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			t.Logf("--- last lines of the %s log ---\n%s", name, tails[name])
		}
	})
	return cfg
}
