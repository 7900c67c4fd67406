package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"testing"
)

// recorder is a testing.TB that records what a check reports instead of
// failing a test, so that a library written for go test (the conformance kit)
// can run inside the CLI. FailNow, Fatal and Skip end the calling goroutine as
// in a test; run the check with recorder.run.
type recorder struct {
	testing.TB // never called: present only for TB's unexported method

	name string
	ctx  context.Context

	mu       sync.Mutex
	failed   bool
	skipped  bool
	stopped  bool // FailNow or SkipNow ended the check early
	messages []recorded
	cleanups []func()
	tempDirs []string
}

type recorded struct {
	Failure bool   `json:"failure"`
	Text    string `json:"text"`
}

func newRecorder(ctx context.Context, name string) *recorder {
	return &recorder{name: name, ctx: ctx}
}

// run calls check with r in its own goroutine (FailNow exits only that
// goroutine, as in a test) and then runs the registered cleanups, last first.
func (r *recorder) run(check func(testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		completed := false
		defer func() {
			// A check that panics fails, with the panic as its message,
			// instead of taking the CLI down with it.
			if v := recover(); v != nil {
				r.add(true, fmt.Sprintf("panic: %v", v))
			}
			if !completed {
				r.mu.Lock()
				r.stopped = true
				r.mu.Unlock()
			}
		}()
		check(r)
		completed = true
	}()
	<-done
	r.mu.Lock()
	cleanups := r.cleanups
	r.cleanups = nil
	dirs := r.tempDirs
	r.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	for _, d := range dirs {
		os.RemoveAll(d)
	}
}

func (r *recorder) add(failure bool, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if failure {
		r.failed = true
	}
	r.messages = append(r.messages, recorded{Failure: failure, Text: text})
}

func (r *recorder) Error(args ...any)                 { r.add(true, fmt.Sprint(args...)) }
func (r *recorder) Errorf(format string, args ...any) { r.add(true, fmt.Sprintf(format, args...)) }
func (r *recorder) Fatal(args ...any)                 { r.Error(args...); r.FailNow() }
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); r.FailNow() }
func (r *recorder) Log(args ...any)                   { r.add(false, fmt.Sprint(args...)) }
func (r *recorder) Logf(format string, args ...any)   { r.add(false, fmt.Sprintf(format, args...)) }
func (r *recorder) Helper()                           {}
func (r *recorder) Name() string                      { return r.name }
func (r *recorder) Context() context.Context          { return r.ctx }
func (r *recorder) Output() io.Writer                 { return io.Discard }
func (r *recorder) Attr(key, value string)            { r.add(false, key+"="+value) }

func (r *recorder) Fail() {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
}

func (r *recorder) FailNow() { r.Fail(); runtime.Goexit() }

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recorder) Skip(args ...any)                 { r.Log(args...); r.SkipNow() }
func (r *recorder) Skipf(format string, args ...any) { r.Logf(format, args...); r.SkipNow() }

func (r *recorder) SkipNow() {
	r.mu.Lock()
	r.skipped = true
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Skipped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.skipped
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	r.cleanups = append(r.cleanups, f)
	r.mu.Unlock()
}

func (r *recorder) TempDir() string {
	d, err := os.MkdirTemp("", "dranodectl-check-")
	if err != nil {
		r.Fatalf("TempDir: %v", err)
	}
	r.mu.Lock()
	r.tempDirs = append(r.tempDirs, d)
	r.mu.Unlock()
	return d
}

func (r *recorder) ArtifactDir() string { return r.TempDir() }

// A check run by the CLI must not change the process's environment or
// working directory behind the operator's back.
func (r *recorder) Setenv(key, value string) {
	r.Fatalf("Setenv(%q) is not available outside go test", key)
}

func (r *recorder) Chdir(dir string) { r.Fatalf("Chdir(%q) is not available outside go test", dir) }
