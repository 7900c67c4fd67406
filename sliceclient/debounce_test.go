package sliceclient

import (
	"context"
	"testing"
	"time"
)

// The coalescing window against the real control plane: the first change
// after a quiet period is synced at once; a burst inside the window waits in
// the delaying queue as one entry and writes nothing yet.
func TestIntegrationDebounceCoalescesABurst(t *testing.T) {
	client := controlPlane(t)
	node := createNode(t, client, "debounce")
	p, err := New(Options{Client: clientOf(client), DriverName: testDriver, NodeName: node.Name, Debounce: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	pool := Pool{Name: "p", Devices: testDevices("d-", 3)}
	if err := p.Update(Inventory{Pools: []Pool{pool}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Creates != 1 {
		t.Fatalf("first sync: %+v, want 1 create", st)
	}
	for i := range 5 {
		pool.Devices[0] = testDevice("d-0", "model-"+string(rune('a'+i)))
		if err := p.Update(Inventory{Pools: []Pool{pool}}); err != nil {
			t.Fatal(err)
		}
	}
	// Inside the hour-long window nothing is ready to run: the burst waits
	// as one queued pool and nothing more was written.
	if n := p.queue.Len(); n != 0 {
		t.Fatalf("%d pools ready inside the window, want 0", n)
	}
	if st := p.Stats(); st.Updates != 0 || st.Syncs != 1 {
		t.Fatalf("inside the window: %+v", st)
	}
	p.mu.Lock()
	pending := p.want["p"] - p.done["p"]
	p.mu.Unlock()
	if pending == 0 {
		t.Fatal("the burst left no pending sync")
	}
}
