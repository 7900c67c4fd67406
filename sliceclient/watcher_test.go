package sliceclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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

// startShared starts a publisher for node that uses w.
func startShared(t *testing.T, w *Watcher, node string, uid types.UID, inv Inventory) *Publisher {
	t.Helper()
	p, err := New(Options{Client: clientOf(controlPlane(t)), DriverName: testDriver, NodeName: node, NodeUID: uid, Watcher: w,
		OnError: func(err error) { t.Logf("publisher for %s: %v", node, err) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Update(inv); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	waitSynced(t, p)
	return p
}

// Publishers of several nodes sharing one watch each publish, repair and
// restart only their own node's slices.
func TestIntegrationSharedWatcher(t *testing.T) {
	c := controlPlane(t)
	w, err := NewWatcher(clientOf(c), testDriver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop) // runs after the publishers' cleanups

	const n = 3
	nodes := make([]string, n)
	pools := make([]Pool, n)
	pubs := make([]*Publisher, n)
	for i := range nodes {
		node := createNode(t, c, fmt.Sprintf("shared-watch-%d", i))
		nodes[i] = node.Name
		pools[i] = Pool{Name: "pool-a", Devices: testDevices(fmt.Sprintf("dev-%d-", i), 200+i*100)}
		pubs[i] = startShared(t, w, node.Name, node.UID, Inventory{Pools: []Pool{pools[i]}})
	}
	for i := range nodes {
		waitPool(t, c, nodes[i], pools[i])
		for _, s := range listSlices(t, c, nodes[i]) {
			if refs := s.OwnerReferences; len(refs) != 1 || refs[0].Name != nodes[i] {
				t.Errorf("slice %s of node %s owned by %+v", s.Name, nodes[i], refs)
			}
		}
	}

	// The kubelet's wipe of node 1: only its publisher writes, and its
	// slices come back.
	before := make([]Stats, n)
	for i, p := range pubs {
		before[i] = p.Stats()
	}
	if err := c.ResourceV1().ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{
		FieldSelector: fields.Set{resourceapi.ResourceSliceSelectorNodeName: nodes[1]}.String(),
	}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, c, nodes[1], pools[1])
	for i, p := range pubs {
		waitSynced(t, p)
		st := p.Stats()
		writes := st.Creates + st.Updates + st.Deletes - before[i].Creates - before[i].Updates - before[i].Deletes
		switch {
		case i == 1 && writes == 0:
			t.Errorf("publisher of the wiped node wrote nothing")
		case i != 1 && writes != 0:
			t.Errorf("publisher of node %d wrote %d times after another node's wipe", i, writes)
		}
	}
	for i := range nodes {
		waitPool(t, c, nodes[i], pools[i])
	}

	// A publisher restarted on the running watch learns its node's slices
	// from the watch's cache and writes nothing.
	pubs[2].Stop()
	again := startShared(t, w, nodes[2], "", Inventory{Pools: []Pool{pools[2]}})
	if st := again.Stats(); st.Creates+st.Updates+st.Deletes != 0 {
		t.Errorf("restart on the shared watch wrote: %+v", st)
	}
}

// With NodeUID given, Start does not read the Node: a publisher for a Node
// that does not exist starts and puts the given UID in the owner reference.
func TestIntegrationNodeUIDGivenSkipsNodeRead(t *testing.T) {
	c := controlPlane(t)
	const node, uid = "no-such-node", types.UID("given-uid")
	pool := Pool{Name: "pool-a", Devices: testDevices("dev-", 10)}
	startShared(t, nil, node, uid, Inventory{Pools: []Pool{pool}})
	for _, s := range waitPool(t, c, node, pool) {
		if refs := s.OwnerReferences; len(refs) != 1 || refs[0].UID != uid {
			t.Errorf("slice %s owner references %+v, want UID %s", s.Name, refs, uid)
		}
	}
	// The same without a UID reads the Node, which is not there.
	p, err := New(Options{Client: clientOf(c), DriverName: testDriver, NodeName: node})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err == nil {
		p.Stop()
		t.Fatal("Start without NodeUID for a missing Node succeeded")
	}
}

// TestIntegrationWatcherHandsEventsToTheirNode: a subscriber gets the
// node's slices already known, then only events about its node's slices;
// after unsubscribing nothing more arrives.
func TestIntegrationWatcherHandsEventsToTheirNode(t *testing.T) {
	client := controlPlane(t)
	const driver = "dispatch.example.com" // no other test's slices
	w, err := NewWatcher(clientOf(client), driver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	slice := func(name, node string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &node,
				Pool: resourceapi.ResourcePool{Name: "pool", ResourceSliceCount: 1}},
		}
	}
	ctx := context.Background()
	api := client.ResourceV1().ResourceSlices()
	// A clean start when the test runs again on the same control plane.
	if err := api.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{
		FieldSelector: fields.Set{resourceapi.ResourceSliceSelectorDriver: driver}.String(),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Create(ctx, slice("before", "node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.run(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.reg.HasSyncedChecker().Done():
	case <-time.After(time.Minute):
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
		case <-time.After(30 * time.Second):
			t.Fatalf("no event for %s", node)
			return seen{}
		}
	}
	if got := next("node-a"); got != (seen{"before", false}) {
		t.Fatalf("node-a's first event %+v, want the slice known at subscription", got)
	}
	own := slice("own", "node-a")
	if _, err := api.Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := next("node-a"); got != (seen{"own", false}) {
		t.Fatalf("node-a got %+v, want own added", got)
	}
	other := slice("other", "node-b")
	if _, err := api.Create(ctx, other, metav1.CreateOptions{}); err != nil {
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

// writeGauge is a transport that holds every write for a while and records
// the most writes it ever had in flight at once.
type writeGauge struct {
	next          http.RoundTripper
	mu            sync.Mutex
	inFlight, max int
	writes        int
}

func (g *writeGauge) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet {
		return g.next.RoundTrip(req)
	}
	g.mu.Lock()
	g.inFlight++
	g.writes++
	g.max = max(g.max, g.inFlight)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inFlight--
		g.mu.Unlock()
	}()
	// Long enough that writes sent together are in flight together.
	time.Sleep(50 * time.Millisecond)
	return g.next.RoundTrip(req)
}

// TestIntegrationWatcherMaxWritesInFlight: publishers sharing a Watcher
// with MaxWritesInFlight(2) publish everything, and never have more than
// two writes in flight together, although each of their first syncs sends
// three creates at once and they all start together.
func TestIntegrationWatcherMaxWritesInFlight(t *testing.T) {
	controlPlane(t)
	cases := []struct {
		name  string
		opts  []WatcherOption
		bound int // 0: none, and more than 2 writes must have been in flight
	}{
		{name: "bounded", opts: []WatcherOption{MaxWritesInFlight(2)}, bound: 2},
		{name: "unbounded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gauge := &writeGauge{}
			cfg := rest.CopyConfig(envConfig)
			cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { gauge.next = rt; return gauge }
			c, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			driver := tc.name + ".bound.example.com"
			w, err := NewWatcher(clientOf(c), driver, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Stop)
			const n = 4
			nodes := make([]*corev1.Node, n)
			pools := make([]Pool, n)
			pubs := make([]*Publisher, n)
			for i := range nodes {
				nodes[i] = createNode(t, c, fmt.Sprintf("bound-%s-%d", tc.name, i))
				// 300 plain devices: three slices, created together.
				pools[i] = Pool{Name: "pool-a", Devices: testDevices(fmt.Sprintf("dev-%d-", i), 300)}
				p, err := New(Options{Client: clientOf(c), DriverName: driver, NodeName: nodes[i].Name, NodeUID: nodes[i].UID, Watcher: w})
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Update(Inventory{Pools: []Pool{pools[i]}}); err != nil {
					t.Fatal(err)
				}
				pubs[i] = p
			}
			gauge.mu.Lock()
			gauge.max, gauge.writes = 0, 0 // the Node creates above do not count
			gauge.mu.Unlock()
			var wg sync.WaitGroup
			for _, p := range pubs {
				wg.Go(func() {
					if err := p.Start(context.Background()); err != nil {
						t.Error(err)
					}
				})
				t.Cleanup(p.Stop)
			}
			wg.Wait()
			for i, p := range pubs {
				waitSynced(t, p)
				if len(listSlices(t, c, nodes[i].Name)) != 3 {
					t.Fatalf("node %d: not all three slices stored", i)
				}
			}
			gauge.mu.Lock()
			defer gauge.mu.Unlock()
			if gauge.writes != 3*n {
				t.Errorf("%d writes, want %d", gauge.writes, 3*n)
			}
			switch {
			case tc.bound > 0 && gauge.max > tc.bound:
				t.Errorf("%d writes in flight at once, bound %d", gauge.max, tc.bound)
			case tc.bound == 0 && gauge.max <= 2:
				t.Errorf("without a bound only %d writes were ever in flight together: the test cannot tell a bound from none", gauge.max)
			}
		})
	}
}

// The publisher keeps no decoded copy of its slices besides the watch's
// cache: after its writes, every slice it knows is the cache's object
// (whichever of the write's answer and its watch event came first), and
// neither holds managedFields, which the server still keeps (an update
// sent without them leaves them as they were).
func TestIntegrationOneCopyOfEachSlice(t *testing.T) {
	c := controlPlane(t)
	w, err := NewWatcher(clientOf(c), testDriver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	node := createNode(t, c, "one-copy")
	pool := Pool{Name: "pool-a", Devices: testDevices("dev-", 300)} // three slices
	p := startShared(t, w, node.Name, node.UID, Inventory{Pools: []Pool{pool}})
	// One device changed: an update of one slice.
	pool.Devices = append([]resourceapi.Device(nil), pool.Devices...)
	pool.Devices[0] = testDevice(pool.Devices[0].Name, "changed")
	if err := p.Update(Inventory{Pools: []Pool{pool}}); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, p)
	if st := p.Stats(); st.Updates == 0 {
		t.Fatalf("no update written: %+v", st)
	}
	waitPool(t, c, node.Name, pool)

	shared := func() (string, bool) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.stored) == 0 {
			return "the publisher knows no slice", false
		}
		for name, s := range p.stored {
			cached, ok, err := w.informer.GetStore().GetByKey(name)
			switch {
			case err != nil || !ok:
				return fmt.Sprintf("slice %s is not in the watch's cache (%v)", name, err), false
			case s.obj != cached:
				return fmt.Sprintf("slice %s: the publisher holds its own copy of resourceVersion %s", name, s.obj.ResourceVersion), false
			case s.obj.ManagedFields != nil:
				return fmt.Sprintf("slice %s kept its managedFields", name), false
			}
		}
		return "", true
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		why, ok := shared()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(why)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, s := range listSlices(t, c, node.Name) {
		if len(s.ManagedFields) == 0 {
			t.Errorf("slice %s has no managedFields on the server", s.Name)
		}
	}
}
