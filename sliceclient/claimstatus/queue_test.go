package claimstatus

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// fakeServer answers status applies; each request is reported on seen
// (claim name and the number of devices applied) and, while hold is set,
// waits for a value on release before answering with the next status in
// codes (200 when codes is empty).
type fakeServer struct {
	*httptest.Server
	seen    chan string
	release chan struct{}

	mu    sync.Mutex
	hold  bool
	codes []int
}

func newFakeServer(t *testing.T) *fakeServer {
	f := &fakeServer{seen: make(chan string, 100), release: make(chan struct{})}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		var body struct {
			Metadata struct{ Name string }
			Status   struct{ Devices []any }
		}
		if err := json.Unmarshal(data, &body); err != nil {
			t.Errorf("body %q: %v", data, err)
		}
		// Decide before reporting the request: a test that saw it may
		// change hold at once, and a request that read hold after that
		// would not wait for the release the test then sends.
		f.mu.Lock()
		hold := f.hold
		code := http.StatusOK
		if len(f.codes) > 0 {
			code, f.codes = f.codes[0], f.codes[1:]
		}
		f.mu.Unlock()
		f.seen <- body.Metadata.Name + "/" + string(rune('0'+len(body.Status.Devices)))
		if hold {
			<-f.release
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if code == http.StatusOK {
			_, _ = w.Write([]byte(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim"}`))
			return
		}
		reason := metav1.StatusReasonServiceUnavailable
		if code == http.StatusForbidden {
			reason = metav1.StatusReasonForbidden
		}
		data, _ = json.Marshal(metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
			Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: "fake " + string(reason)})
		_, _ = w.Write(data)
	}))
	t.Cleanup(f.Close)
	return f
}

// newFakeWriter is a fake server and a Writer of gpu.example.com to it.
func newFakeWriter(t *testing.T) (*fakeServer, *Writer) {
	f := newFakeServer(t)
	w, err := New(Options{REST: restFor(t, f.URL), DriverName: "gpu.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	return f, w
}

func devs(n int) []resourcev1.AllocatedDeviceStatus {
	out := make([]resourcev1.AllocatedDeviceStatus, n)
	for i := range out {
		out[i] = resourcev1.AllocatedDeviceStatus{Pool: "p", Device: "d" + string(rune('0'+i))}
	}
	return out
}

func claimNamed(name string) Claim {
	return Claim{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}
}

// results collects a queue's results on a channel.
func results() (func(Result), chan Result) {
	ch := make(chan Result, 100)
	return func(r Result) { ch <- r }, ch
}

// TestQueueCoalesces: while one write of a claim is in flight, newer
// intents for it replace each other and only the last goes out, after the
// one in flight; a forgotten claim costs no write.
func TestQueueCoalesces(t *testing.T) {
	f, w := newFakeWriter(t)
	onResult, done := results()
	q := NewQueue(QueueOptions{Result: onResult})
	defer q.Stop(context.Background())

	f.mu.Lock()
	f.hold = true
	f.mu.Unlock()
	q.Apply(w, claimNamed("a"), devs(1))
	if got := <-f.seen; got != "a/1" {
		t.Fatalf("first write %q", got)
	}
	// The worker is inside the write of a/1.
	q.Apply(w, claimNamed("a"), devs(2))
	q.Apply(w, claimNamed("a"), devs(3))
	q.Apply(w, claimNamed("b"), devs(1))
	if !q.Forget(w, "uid-b") {
		t.Error("Forget found no unsent intent for b")
	}
	if q.Forget(w, "uid-b") {
		t.Error("Forget found an intent twice")
	}
	f.mu.Lock()
	f.hold = false
	f.mu.Unlock()
	f.release <- struct{}{}
	for _, want := range []string{"a/1", "a/3"} {
		r := <-done
		if r.Err != nil || r.Claim.Name+"/"+string(rune('0'+r.Devices)) != want {
			t.Fatalf("result %+v, want %s written", r, want)
		}
	}
	if got := <-f.seen; got != "a/3" {
		t.Errorf("second write %q, want a/3 (a/2 replaced, b forgotten)", got)
	}
	if n := q.Stop(context.Background()); n != 0 {
		t.Errorf("%d dropped at stop", n)
	}
	select {
	case extra := <-f.seen:
		t.Errorf("unexpected write %q", extra)
	default:
	}
}

// TestQueueYields: nothing is written while a call is in flight; the
// write goes out when the last call ends.
func TestQueueYields(t *testing.T) {
	f, w := newFakeWriter(t)
	var calls Calls
	onResult, done := results()
	// MaxYield far beyond the test's life: only the calls' end can let
	// the write go.
	q := NewQueue(QueueOptions{Calls: &calls, MaxYield: 1 << 62, Result: onResult})
	defer q.Stop(context.Background())
	// Set before the first intent: the worker reads it after taking one.
	yielding := make(chan struct{}, 1)
	q.yielding = func() { yielding <- struct{}{} }
	calls.Begin()
	calls.Begin()
	q.Apply(w, claimNamed("a"), devs(1))
	select {
	case got := <-f.seen:
		t.Fatalf("write %q while calls were in flight", got)
	case <-yielding:
	}
	calls.End()
	select {
	case got := <-f.seen:
		t.Fatalf("write %q while a call was in flight", got)
	default:
	}
	calls.End()
	if r := <-done; r.Err != nil || r.Claim.Name != "a" {
		t.Fatalf("result %+v", r)
	}
}

// TestQueueRetries: a failure that may pass (503) is tried again; a
// refusal (403) is not.
func TestQueueRetries(t *testing.T) {
	f := newFakeServer(t)
	f.codes = []int{http.StatusServiceUnavailable, http.StatusOK, http.StatusForbidden}
	w, err := New(Options{REST: restFor(t, f.URL), DriverName: "gpu.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	onResult, done := results()
	q := NewQueue(QueueOptions{Result: onResult})
	defer q.Stop(context.Background())
	q.Apply(w, claimNamed("a"), devs(1))
	if r := <-done; r.Err == nil || !r.Retry || r.Attempts != 1 {
		t.Fatalf("first attempt %+v, want a failure to retry", r)
	}
	if r := <-done; r.Err != nil || r.Attempts != 2 {
		t.Fatalf("second attempt %+v, want success", r)
	}
	q.Apply(w, claimNamed("b"), devs(1))
	if r := <-done; r.Err == nil || r.Retry || Reason(r.Err) != "Forbidden" {
		t.Fatalf("refused write %+v, want a final Forbidden", r)
	}
}

// TestQueueWaitsForQuiet: a write waits until the calls have been over for
// the quiet period, and a call in that period starts the wait again; the
// test holds the clock (Queue.after), so nothing depends on timing.
func TestQueueWaitsForQuiet(t *testing.T) {
	f, w := newFakeWriter(t)
	var calls Calls
	onResult, done := results()
	const quiet = time.Hour
	q := NewQueue(QueueOptions{Calls: &calls, Quiet: quiet, MaxYield: 1 << 62, Result: onResult})
	defer q.Stop(context.Background())
	timers := make(chan chan time.Time)
	q.after = func(d time.Duration) <-chan time.Time {
		if d <= 0 || d > quiet {
			t.Errorf("quiet wait of %v, want within (0, %v]", d, quiet)
		}
		ch := make(chan time.Time, 1)
		timers <- ch
		return ch
	}
	calls.Begin()
	calls.End()
	q.Apply(w, claimNamed("a"), devs(1))
	first := <-timers
	// A call begins and ends within the quiet period: the wait starts over.
	calls.Begin()
	calls.End()
	first <- time.Now()
	second := <-timers
	select {
	case got := <-f.seen:
		t.Fatalf("write %q before the quiet period ended", got)
	default:
	}
	second <- time.Now()
	if r := <-done; r.Err != nil || r.Claim.Name != "a" {
		t.Fatalf("result %+v", r)
	}
	if got := <-f.seen; got != "a/1" {
		t.Fatalf("wrote %q, want a/1", got)
	}
	// A claim unprepared within the period costs no write: the next write
	// to reach the server is c's.
	calls.Begin()
	calls.End()
	q.Apply(w, claimNamed("b"), devs(1))
	third := <-timers
	if !q.Forget(w, claimNamed("b").UID) {
		t.Fatal("Forget found no unsent write of b")
	}
	q.Apply(w, claimNamed("c"), devs(2))
	third <- time.Now()
	if r := <-done; r.Err != nil || r.Claim.Name != "c" {
		t.Fatalf("result %+v, want c's", r)
	}
	if got := <-f.seen; got != "c/2" {
		t.Fatalf("wrote %q, want c/2", got)
	}
}
