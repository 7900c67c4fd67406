package sliceclient

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/inventory/inventorytest"
	"github.com/dranode/dranode/sliceclient"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestSharedWatcher: publishers of several nodes sharing one watch each
// publish, repair and restart only their own node's slices; a publisher
// that starts on the running watch is handed its node's slices from the
// watch's cache.
func TestSharedWatcher(t *testing.T) {
	c := controlPlane(t)
	w, err := sliceclient.NewWatcher(publisherClient(t, nil), testDriver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop) // runs after the publishers' cleanups

	const n = 3
	nodes := make([]string, n)
	pools := make([]inventory.Pool, n)
	pubs := make([]*sliceclient.Publisher, n)
	for i := range nodes {
		node := createNode(t, c, fmt.Sprintf("shared-watch-%d", i))
		nodes[i] = node.Name
		pools[i] = inventory.Pool{Name: "pool-a", Devices: inventorytest.Devices(fmt.Sprintf("dev-%d-", i), 200+i*100)}
		pubs[i] = startPublisher(t, sliceclient.Options{NodeName: node.Name, NodeUID: node.UID, Watcher: w}, onePool(pools[i]))
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
	before := make([]writes, n)
	for i := range nodes {
		before[i] = auditedWrites(t, nodes[i])
	}
	if err := c.ResourceV1().ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{
		FieldSelector: fields.Set{resourceapi.ResourceSliceSelectorNodeName: nodes[1]}.String(),
	}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, c, nodes[1], pools[1])
	for i, p := range pubs {
		waitSynced(t, p)
		d := auditedWrites(t, nodes[i]).minus(before[i])
		switch {
		case i == 1 && d.Creates == 0:
			t.Errorf("publisher of the wiped node put nothing back: %+v", d)
		case i != 1 && d != (writes{}):
			t.Errorf("node %d's slices were written %+v after another node's wipe", i, d)
		}
	}
	for i := range nodes {
		waitPool(t, c, nodes[i], pools[i])
	}

	// A publisher restarted on the running watch learns its node's slices
	// from the watch's cache and writes nothing; without the NodeUID it
	// reads the Node.
	pubs[2].Stop()
	audited := auditedWrites(t, nodes[2])
	again := startPublisher(t, sliceclient.Options{NodeName: nodes[2], Watcher: w}, onePool(pools[2]))
	if st := again.Stats(); st.Creates+st.Updates+st.Deletes != 0 {
		t.Errorf("restart on the shared watch wrote: %+v", st)
	}
	if got := auditedWrites(t, nodes[2]).minus(audited); got != (writes{}) {
		t.Errorf("restart on the shared watch: the audit log has %+v", got)
	}
}

// With NodeUID given, Start does not read the Node: a publisher for a Node
// that does not exist starts and puts the given UID in the owner reference.
func TestNodeUIDGivenSkipsNodeRead(t *testing.T) {
	c := controlPlane(t)
	node := fmt.Sprintf("no-such-node-%d", nodeSeq.Add(1))
	const uid = types.UID("given-uid")
	pool := inventory.Pool{Name: "pool-a", Devices: inventorytest.Devices("dev-", 10)}
	startPublisher(t, sliceclient.Options{NodeName: node, NodeUID: uid}, onePool(pool))
	for _, s := range waitPool(t, c, node, pool) {
		if refs := s.OwnerReferences; len(refs) != 1 || refs[0].UID != uid {
			t.Errorf("slice %s owner references %+v, want UID %s", s.Name, refs, uid)
		}
	}
	// The same without a UID reads the Node, which is not there.
	p, err := sliceclient.New(sliceclient.Options{Client: publisherClient(t, nil), DriverName: testDriver, NodeName: node})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err == nil {
		p.Stop()
		t.Fatal("Start without NodeUID for a missing Node succeeded")
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

// TestWatcherMaxWritesInFlight: publishers sharing a Watcher with
// MaxWritesInFlight(2) publish everything, and never have more than two
// writes in flight together, although each of their first syncs sends three
// creates at once and they all start together.
func TestWatcherMaxWritesInFlight(t *testing.T) {
	controlPlane(t)
	cases := []struct {
		name  string
		opts  []sliceclient.WatcherOption
		bound int // 0: none, and more than 2 writes must have been in flight
	}{
		{name: "bounded", opts: []sliceclient.WatcherOption{sliceclient.MaxWritesInFlight(2)}, bound: 2},
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
			client := sliceclient.Client{ResourceSlices: c.ResourceV1().ResourceSlices(), Nodes: c.CoreV1().Nodes()}
			driver := tc.name + ".bound.example.com"
			w, err := sliceclient.NewWatcher(client, driver, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Stop)
			const n = 4
			nodes := make([]*corev1.Node, n)
			pubs := make([]*sliceclient.Publisher, n)
			for i := range nodes {
				nodes[i] = createNode(t, c, fmt.Sprintf("bound-%s-%d", tc.name, i))
				// 300 plain devices: three slices, created together.
				pool := inventory.Pool{Name: "pool-a", Devices: inventorytest.Devices(fmt.Sprintf("dev-%d-", i), 300)}
				p, err := sliceclient.New(sliceclient.Options{Client: client, DriverName: driver, NodeName: nodes[i].Name, NodeUID: nodes[i].UID, Watcher: w})
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Update(onePool(pool)); err != nil {
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
