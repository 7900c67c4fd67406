package sliceclient

import (
	"context"
	"errors"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
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
		{"nil client", func() error { _, err := NewWatcher(nil, testDriver); return err }},
		{"invalid driver", func() error { _, err := NewWatcher(fakeClient(), "Not_A_Driver"); return err }},
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
	p, err := New(Options{Client: controlPlane(t), DriverName: testDriver, NodeName: node, NodeUID: uid, Watcher: w,
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
	w, err := NewWatcher(c, testDriver)
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
	p, err := New(Options{Client: c, DriverName: testDriver, NodeName: node})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err == nil {
		p.Stop()
		t.Fatal("Start without NodeUID for a missing Node succeeded")
	}
}
