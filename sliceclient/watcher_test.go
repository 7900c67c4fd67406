package sliceclient

import (
	"context"
	"errors"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestWatcherOptionErrors(t *testing.T) {
	other, err := NewWatcher(fakeClient(), "other.example.com")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		make func() error
	}{
		{"nil client", func() error { _, err := NewWatcher(Client{}, testDriver); return err }},
		{"invalid driver", func() error { _, err := NewWatcher(fakeClient(), "Not_A_Driver"); return err }},
		{"negative MaxWritesInFlight", func() error { _, err := NewWatcher(fakeClient(), testDriver, MaxWritesInFlight(-1)); return err }},
		{"watcher of another driver", func() error {
			_, err := New(Options{Client: fakeClient(), DriverName: testDriver, NodeName: testNode, Watcher: other})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.make(); !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("got %v, want ErrInvalidOptions", err)
			}
		})
	}
}

func TestStartAfterWatcherStopFails(t *testing.T) {
	w, err := NewWatcher(fakeClient(), testDriver)
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	p, err := New(Options{Client: fakeClient(), DriverName: testDriver, NodeName: testNode, NodeUID: "uid-1", Watcher: w})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("Start with a stopped Watcher: %v, want ErrInvalidOptions", err)
	}
}

// TestWatcherHandsEventsToTheirNode: a subscriber gets the node's slices
// already known, then only events about its node's slices; after
// unsubscribing nothing more arrives. Pure dispatch logic, on a fake
// clientset; integration/sliceclient's TestSharedWatcher shows the same
// from the outside against a real API server.
func TestWatcherHandsEventsToTheirNode(t *testing.T) {
	client := fakeClient()
	w, err := NewWatcher(client, testDriver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	slice := func(name, node string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{Driver: testDriver, NodeName: &node,
				Pool: resourceapi.ResourcePool{Name: "pool", ResourceSliceCount: 1}},
		}
	}
	ctx := context.Background()
	api := client.ResourceSlices
	if _, err := api.Create(ctx, slice("before", "node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.run(); err != nil {
		t.Fatal(err)
	}
	synced, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(synced.Done(), w.reg.HasSynced) {
		t.Fatal("the Watcher's initial list never arrived")
	}

	type seen struct {
		name    string
		deleted bool
	}
	events := map[string]chan seen{"node-a": make(chan seen, 10), "node-b": make(chan seen, 10)}
	unsubscribe := map[string]func(){}
	for node, ch := range events {
		unsub, err := w.subscribe(node, func(obj any, deleted bool) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			ch <- seen{obj.(*resourceapi.ResourceSlice).Name, deleted}
		})
		if err != nil {
			t.Fatal(err)
		}
		unsubscribe[node] = unsub
	}
	next := func(node string) seen {
		t.Helper()
		select {
		case s := <-events[node]:
			return s
		case <-synced.Done():
			t.Fatalf("no event for %s", node)
			return seen{}
		}
	}
	if got := next("node-a"); got != (seen{"before", false}) {
		t.Fatalf("node-a's first event %+v, want the slice known at subscription", got)
	}
	if _, err := api.Create(ctx, slice("own", "node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := next("node-a"); got != (seen{"own", false}) {
		t.Fatalf("node-a got %+v, want own added", got)
	}
	if _, err := api.Create(ctx, slice("other", "node-b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := next("node-b"); got != (seen{"other", false}) {
		t.Fatalf("node-b got %+v, want other added", got)
	}
	unsubscribe["node-b"]()
	if err := api.Delete(ctx, "other", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := api.Delete(ctx, "before", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// node-a's deletion arrives after the one of node-b's slice was handed
	// out (events are dispatched in order), so by then node-b would have it.
	if got := next("node-a"); got != (seen{"before", true}) {
		t.Fatalf("node-a got %+v, want before deleted", got)
	}
	if len(events["node-a"]) != 0 {
		t.Fatalf("node-a got events about node-b's slice: %+v", <-events["node-a"])
	}
	select {
	case s := <-events["node-b"]:
		t.Fatalf("node-b got %+v after unsubscribing", s)
	default:
	}
}
