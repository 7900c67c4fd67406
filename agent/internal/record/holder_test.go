package record

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/dranode/dranode/claimcache"
)

const bootID = "3f1c2b9e-0000-4000-8000-000000000001"

// agentEvents is an Agent that writes down what the holder asked of it:
// pure bookkeeping, the record and the sockets are real.
type agentEvents struct {
	mu       sync.Mutex
	events   []string
	stopping error
}

func (e *agentEvents) add(ev string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, ev)
}

func (e *agentEvents) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.events)
}

func (e *agentEvents) Stopping() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopping
}
func (e *agentEvents) StopPublishing()           { e.add("stop publishing") }
func (e *agentEvents) ForwardTo(instance string) { e.add("forward to " + instance) }
func (e *agentEvents) Reclaimed()                { e.add("reclaimed") }

func listen(path string) (net.Listener, error) {
	_ = os.Remove(path)
	return net.Listen("unix", path)
}

// socketDir is a directory short enough for the hand-over socket's path
// (at most 107 bytes), which t.TempDir's may not be.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "record-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startInstance opens the record in dir as instance id and serves the
// hand-over socket, as the agent's Start does.
func startInstance(t *testing.T, dir, id string, timeout time.Duration) (*Holder, *agentEvents, error) {
	t.Helper()
	ev := &agentEvents{}
	h := New(Config{
		Dir:             filepath.Join(dir, "claims.record"),
		StateDir:        dir,
		InstanceID:      id,
		HandoverTimeout: timeout,
		Listen:          listen,
		Log:             testr.New(t).WithValues("instance", id),
	}, ev)
	t.Cleanup(func() {
		h.CloseHandover()
		_ = h.Close()
		h.EndStart()
	})
	if err := h.Open(context.Background(), bootID); err != nil {
		return nil, nil, err
	}
	if err := h.ServeHandover(); err != nil {
		return nil, nil, err
	}
	h.EndStart()
	return h, ev, nil
}

func TestHandOverWaitsForTheOperationInFlightAndReclaims(t *testing.T) {
	dir := socketDir(t)
	old, oldEvents, err := startInstance(t, dir, "old", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	enterLeave, held := old.Enter()
	if !held {
		t.Fatal("the only instance does not hold the record")
	}
	leave := sync.OnceFunc(enterLeave)
	defer leave() // before the cleanup closes the record, on failure too

	type result struct {
		h   *Holder
		err error
	}
	started := make(chan result, 1)
	go func() {
		h, _, err := startInstance(t, dir, "new", time.Minute)
		started <- result{h, err}
	}()
	// The hand-over is queued on the gate once a reader is refused.
	for old.gate.TryRLock() {
		old.gate.RUnlock()
		select {
		case r := <-started:
			t.Fatalf("the new instance started (%v) while an operation was in flight on the old one", r.err)
		default:
		}
		runtime.Gosched()
	}
	ref := claimcache.ClaimRef{Namespace: "default", Name: "in-flight", UID: "0b7e4c2a-1f3d-4e5a-9c8b-123456789abc"}
	if _, err := old.Cache().StartPrepare(ref, ""); err != nil {
		t.Fatalf("committing while the hand-over waits: %v", err)
	}
	oldEvents.add("operation done")
	leave()

	r := <-started
	if r.err != nil {
		t.Fatal(r.err)
	}
	if want := []string{"operation done", "stop publishing", "forward to new"}; !slices.Equal(oldEvents.list(), want) {
		t.Errorf("the old instance's events: %q, want %q", oldEvents.list(), want)
	}
	if old.Held() || !r.h.Held() {
		t.Fatalf("after the hand-over: old holds %v, new holds %v; want false, true", old.Held(), r.h.Held())
	}
	if _, held := old.Enter(); held {
		t.Error("the old instance admits a record operation after the hand-over")
	}
	if _, err := r.h.Cache().Get(ref.UID); err != nil {
		t.Errorf("the claim committed during the hand-over is not in the new holder's record: %v", err)
	}
	if who, err := old.Who(context.Background()); err != nil || who != "new" {
		t.Errorf("Who = %q, %v; want new", who, err)
	}
	if _, err := r.h.Who(context.Background()); !errors.Is(err, ErrNotHolder) {
		t.Errorf("the holder asking Who: %v, want ErrNotHolder", err)
	}

	// The new instance stops: the old one takes the record back.
	r.h.CloseHandover()
	if err := r.h.Close(); err != nil {
		t.Fatal(err)
	}
	if !old.Reclaim() || !old.Held() {
		t.Fatal("the old instance did not take the record back from a stopped holder")
	}
	if got := oldEvents.list(); !slices.Contains(got, "forward to ") || got[len(got)-1] != "reclaimed" {
		t.Errorf("the old instance's events after the reclaim: %q", got)
	}
	if _, err := old.Cache().Get(ref.UID); err != nil {
		t.Errorf("the claim is not in the reclaimed record: %v", err)
	}
	if who, err := r.h.Who(context.Background()); err != nil || who != "old" {
		t.Errorf("Who after the reclaim = %q, %v; want old", who, err)
	}
}

func TestHandOverRefusedWhileStopping(t *testing.T) {
	dir := socketDir(t)
	old, oldEvents, err := startInstance(t, dir, "old", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	stopping := errors.New("agent is stopping")
	oldEvents.mu.Lock()
	oldEvents.stopping = stopping
	oldEvents.mu.Unlock()

	_, _, err = startInstance(t, dir, "new", 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "refused the hand-over: agent is stopping") {
		t.Fatalf("opening a stopping holder's record: %v, want its refusal", err)
	}
	if !old.Held() || len(oldEvents.list()) != 0 {
		t.Errorf("a stopping holder handed over: holds %v, events %q", old.Held(), oldEvents.list())
	}
	if old.Reclaim() != true {
		t.Error("Reclaim of the holder itself reports false")
	}
}

func TestOnlyInstanceNeitherAsksNorServes(t *testing.T) {
	dir := t.TempDir()
	h := New(Config{Dir: filepath.Join(dir, "claims.record"), StateDir: dir, Log: testr.New(t)}, &agentEvents{})
	if _, opened := h.Claims(); opened {
		t.Error("Claims reports an opened record before Open")
	}
	if err := h.Open(context.Background(), bootID); err != nil {
		t.Fatal(err)
	}
	if err := h.ServeHandover(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, handoverSocket)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the only instance serves a hand-over socket: %v", err)
	}
	if n, opened := h.Claims(); !opened || n != 0 {
		t.Errorf("Claims = %d, %v; want 0, true", n, opened)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if h.Held() {
		t.Error("a closed holder holds the record")
	}
}
