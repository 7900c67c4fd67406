package envtest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recordingTB stands in for a test to see what StartT does to it.
type recordingTB struct {
	testing.TB
	fatal   string
	skipped bool
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recordingTB) Skip(...any)          { r.skipped = true; runtime.Goexit() }
func (r *recordingTB) Skipf(string, ...any) { r.skipped = true; runtime.Goexit() }
func (r *recordingTB) SkipNow()             { r.skipped = true; runtime.Goexit() }

// Without binaries a test fails with where they were looked for and how to
// build them; it does not skip.
func TestStartTFailsWithoutBinaries(t *testing.T) {
	dir := t.TempDir()
	rec := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartT(rec, &Environment{BinaryDir: dir})
	}()
	<-done
	if rec.skipped {
		t.Error("StartT skipped the test")
	}
	for _, want := range []string{dir, EtcdBinary, "make controlplane"} {
		if !strings.Contains(rec.fatal, want) {
			t.Errorf("StartT failure %q does not mention %q", rec.fatal, want)
		}
	}
}
