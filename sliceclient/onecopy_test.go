package sliceclient

import (
	"testing"
	"time"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/inventory/inventorytest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func newTestPublisher(t *testing.T, debounce time.Duration) *Publisher {
	t.Helper()
	p, err := New(Options{Client: fakeClient(), DriverName: testDriver, NodeName: testNode, NodeUID: "node-uid", Debounce: debounce})
	if err != nil {
		t.Fatal(err)
	}
	p.planner.owner = testOwner
	return p
}

// TestOneCopyOfEachSlice: after a write, the publisher keeps the watch
// cache's object for the slice, not the write's answer (one decoded copy of
// each slice), whichever of the two arrives first, holds it without
// managedFields, and takes the watch event for the echo it is: no new sync.
// The mechanism is internal; integration/sliceclient checks what can be
// seen of it from outside (managedFields kept on the server, no extra
// writes).
func TestOneCopyOfEachSlice(t *testing.T) {
	for _, eventFirst := range []bool{false, true} {
		p := newTestPublisher(t, -1)
		pool := inventory.Pool{Name: "pool", Devices: inventorytest.Devices("dev-", 3)}
		if err := p.Update(inventory.Inventory{Pools: []inventory.Pool{pool}}); err != nil {
			t.Fatal(err)
		}
		plan := p.planner.plan(pool.Name, newDesiredPool(pool), nil, nil)
		if len(plan.creates) != 1 {
			t.Fatalf("%d creates planned, want 1", len(plan.creates))
		}
		w := plan.creates[0]
		name := w.obj.Name
		// What the server answers, and the watch cache's own decoding of
		// the same version (the informer's transform drops managedFields).
		answer := w.obj.DeepCopy()
		answer.ResourceVersion, answer.UID = "7", "slice-uid"
		answer.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "sliceclient", Operation: metav1.ManagedFieldsOperationUpdate}}
		cached := answer.DeepCopy()
		if _, err := dropManagedFields(cached); err != nil {
			t.Fatal(err)
		}

		p.mu.Lock()
		p.writing[name]++ // as syncPool does before the write
		wantBefore := p.want[pool.Name]
		p.mu.Unlock()
		if eventFirst {
			p.observe(cached, false)
		}
		p.stored1(w, answer)
		p.writeDone(pool.Name, name, eventOf(answer, false), true)
		if !eventFirst {
			p.observe(cached, false)
		}

		p.mu.Lock()
		got := p.stored[name]
		want := p.want[pool.Name]
		p.mu.Unlock()
		switch {
		case got == nil:
			t.Fatalf("eventFirst=%v: the publisher knows no slice %s", eventFirst, name)
		case got.obj != cached:
			t.Errorf("eventFirst=%v: the publisher holds its own copy of the slice, not the watch cache's", eventFirst)
		case got.obj.ManagedFields != nil:
			t.Errorf("eventFirst=%v: the publisher's view kept managedFields", eventFirst)
		}
		if want != wantBefore {
			t.Errorf("eventFirst=%v: the echo of the publisher's own write scheduled a sync", eventFirst)
		}
		if !got.canon().equal(&w.canon) {
			t.Errorf("eventFirst=%v: the slice kept is not what was written", eventFirst)
		}
	}
}

// TestDebounceCoalescesABurst: the first change after a quiet period is
// queued at once; a burst inside the window waits in the delaying queue as
// one pending sync, with nothing ready to run.
func TestDebounceCoalescesABurst(t *testing.T) {
	p := newTestPublisher(t, time.Hour)
	pool := inventory.Pool{Name: "p", Devices: inventorytest.Devices("d-", 3)}
	if err := p.Update(inventory.Inventory{Pools: []inventory.Pool{pool}}); err != nil {
		t.Fatal(err)
	}
	if n := p.queue.Len(); n != 1 {
		t.Fatalf("%d pools ready after the first change, want 1", n)
	}
	// The sync starts (processNext's bookkeeping) and ends.
	item, _ := p.queue.Get()
	p.mu.Lock()
	p.lastStart[item] = time.Now()
	p.done[item] = p.want[item]
	p.mu.Unlock()
	p.queue.Done(item)

	for i := range 5 {
		pool.Devices[0] = inventorytest.Device("d-0", "model-"+string(rune('a'+i)))
		if err := p.Update(inventory.Inventory{Pools: []inventory.Pool{pool}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.queue.Len(); n != 0 {
		t.Fatalf("%d pools ready inside the window, want 0", n)
	}
	p.mu.Lock()
	pending := p.want["p"] - p.done["p"]
	p.mu.Unlock()
	if pending == 0 {
		t.Fatal("the burst left no pending sync")
	}
	p.queue.ShutDown()
}

// TestDeletionBeforeTheWriteAnswerIsRepaired: someone else deletes a slice
// (the kubelet's start-up wipe) between the publisher's write and its
// answer, so that the write's own event and the deletion both arrive
// first. The deleted object is not taken back from the late answer, and
// the pool is synced again, which writes the slice anew. Before, the
// answer put the deleted slice back into the publisher's view, the sync
// found nothing to do, and the node's slices stayed away for good.
func TestDeletionBeforeTheWriteAnswerIsRepaired(t *testing.T) {
	for _, tc := range []struct {
		name   string
		update bool
	}{{"create", false}, {"update", true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPublisher(t, -1)
			pool := inventory.Pool{Name: "pool", Devices: inventorytest.Devices("dev-", 3)}
			if err := p.Update(inventory.Inventory{Pools: []inventory.Pool{pool}}); err != nil {
				t.Fatal(err)
			}
			if tc.update {
				// The slice is stored already, with one device fewer.
				stored := inventory.Pool{Name: "pool", Devices: pool.Devices[:2]}
				old := p.planner.plan(pool.Name, newDesiredPool(stored), nil, nil).creates[0].obj.DeepCopy()
				old.ResourceVersion, old.UID = "5", "slice-uid"
				p.observe(old, false)
			}
			plan := p.planner.plan(pool.Name, p.inventory[pool.Name], p.storedIn(pool.Name), nil)
			var w plannedWrite
			switch {
			case tc.update && len(plan.updates) == 1:
				w = plan.updates[0]
			case !tc.update && len(plan.creates) == 1:
				w = plan.creates[0]
			default:
				t.Fatalf("planned %d creates and %d updates, want one %s", len(plan.creates), len(plan.updates), tc.name)
			}
			name := w.obj.Name
			answer := w.obj.DeepCopy()
			answer.ResourceVersion, answer.UID = "7", "slice-uid"
			gone := answer.DeepCopy()
			gone.ResourceVersion = "8"

			p.mu.Lock()
			p.writing[name]++ // as syncPool does before the write
			wantBefore := p.want[pool.Name]
			p.mu.Unlock()
			p.observe(answer.DeepCopy(), false) // the write's own event
			p.observe(gone, true)               // the wipe
			p.stored1(w, answer)
			p.writeDone(pool.Name, name, eventOf(answer, false), true)

			p.mu.Lock()
			got := p.stored[name]
			want := p.want[pool.Name]
			p.mu.Unlock()
			if got != nil {
				t.Errorf("the publisher holds slice %s (resourceVersion %s), deleted before the answer to its write", name, got.obj.ResourceVersion)
			}
			if want == wantBefore {
				t.Error("the deletion scheduled no sync of the pool")
			}
			again := p.planner.plan(pool.Name, p.inventory[pool.Name], p.storedIn(pool.Name), nil)
			if len(again.creates) != 1 {
				t.Errorf("the next sync plans %d creates, want the slice written anew", len(again.creates))
			}
		})
	}
}

// TestRelistDeletionWithAnOlderVersion: when the watch broke and the
// relist no longer has the slice, the informer reports the deletion with
// the last version it saw, older than the one the publisher's own write
// made. The object is gone all the same, and the pool is synced again;
// a deletion of an earlier object under the same name is not repaired.
func TestRelistDeletionWithAnOlderVersion(t *testing.T) {
	p := newTestPublisher(t, -1)
	pool := inventory.Pool{Name: "pool", Devices: inventorytest.Devices("dev-", 3)}
	if err := p.Update(inventory.Inventory{Pools: []inventory.Pool{pool}}); err != nil {
		t.Fatal(err)
	}
	w := p.planner.plan(pool.Name, p.inventory[pool.Name], nil, nil).creates[0]
	seen := w.obj.DeepCopy()
	seen.ResourceVersion, seen.UID = "5", "slice-uid"
	ours := seen.DeepCopy()
	ours.ResourceVersion = "9" // our update's answer, whose event never came
	p.observe(seen, false)
	p.mu.Lock()
	p.stored[ours.Name] = newStoredSlice(ours)
	p.mu.Unlock()

	earlier := seen.DeepCopy()
	earlier.UID = "earlier-uid"
	before := p.want[pool.Name]
	p.observe(cache.DeletedFinalStateUnknown{Key: earlier.Name, Obj: earlier}, true)
	if p.stored[ours.Name] == nil || p.want[pool.Name] != before {
		t.Fatal("the deletion of an earlier object under the same name touched the current one")
	}
	p.observe(cache.DeletedFinalStateUnknown{Key: seen.Name, Obj: seen}, true)
	if p.stored[ours.Name] != nil {
		t.Error("the publisher still holds the slice the relist found deleted")
	}
	if p.want[pool.Name] == before {
		t.Error("the deletion scheduled no sync of the pool")
	}
}
