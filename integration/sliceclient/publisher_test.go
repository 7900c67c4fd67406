package sliceclient

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/inventory/inventorytest"
	"github.com/dranode/dranode/sliceclient"
	"github.com/dranode/dranode/tools/envtest"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

func onePool(pool inventory.Pool) inventory.Inventory {
	return inventory.Inventory{Pools: []inventory.Pool{pool}}
}

// statsWrites is what a publisher says it wrote, to compare with the audit.
func statsWrites(st sliceclient.Stats) writes { return writes{st.Creates, st.Updates, st.Deletes} }

// publishedPool creates a Node named after name and starts a publisher for
// it with one pool of n devices, and waits until the server has the pool.
func publishedPool(t *testing.T, c kubernetes.Interface, name string, n int) (*corev1.Node, inventory.Pool, *sliceclient.Publisher) {
	t.Helper()
	node := createNode(t, c, name)
	pool := inventory.Pool{Name: "pool-a", Devices: inventorytest.Devices("dev-", n)}
	p := startPublisher(t, sliceclient.Options{NodeName: node.Name}, onePool(pool))
	waitPool(t, c, node.Name, pool)
	return node, pool, p
}

func TestPublishRestartAndOwner(t *testing.T) {
	c := controlPlane(t)
	node, pool, p := publishedPool(t, c, "publish-restart", 1000)
	slices := listSlices(t, c, node.Name)
	if len(slices) != 8 {
		t.Fatalf("%d slices for 1000 devices, want 8", len(slices))
	}
	for _, s := range slices {
		refs := s.OwnerReferences
		if len(refs) != 1 || refs[0].UID != node.UID || refs[0].Kind != "Node" || refs[0].Controller == nil || !*refs[0].Controller {
			t.Errorf("slice %s owner references %+v, want the Node as controller", s.Name, refs)
		}
		if s.Spec.NodeName == nil || *s.Spec.NodeName != node.Name {
			t.Errorf("slice %s nodeName %v", s.Name, s.Spec.NodeName)
		}
	}
	want := writes{Creates: 8}
	if got := statsWrites(p.Stats()); got != want {
		t.Errorf("initial publish stats %+v, want 8 creates only", got)
	}
	if got := auditedWrites(t, node.Name); got != want {
		t.Errorf("initial publish: the audit log has %+v, want 8 creates only", got)
	}
	p.Stop()

	// A restart with the same devices finds its slices and writes nothing.
	p2 := startPublisher(t, sliceclient.Options{NodeName: node.Name}, onePool(pool))
	if st := p2.Stats(); st.Creates+st.Updates+st.Deletes != 0 {
		t.Errorf("restart wrote: %+v", st)
	}
	if got := auditedWrites(t, node.Name); got != want {
		t.Errorf("after the restart the audit log has %+v, want the first run's 8 creates only", got)
	}
	after := listSlices(t, c, node.Name)
	rv := map[string]string{}
	for _, s := range slices {
		rv[s.Name] = s.ResourceVersion
	}
	for _, s := range after {
		if rv[s.Name] != s.ResourceVersion {
			t.Errorf("slice %s changed across the restart", s.Name)
		}
	}
}

// TestMinimalWrites: each change writes only the slices it has to, counted
// by the API server's audit log (and the publisher's own Stats agree), and
// the pool generation is bumped only when the layout changes.
func TestMinimalWrites(t *testing.T) {
	c := controlPlane(t)
	node, pool, p := publishedPool(t, c, "minimal-writes", 1000)

	steps := []struct {
		name   string
		change func(*inventory.Pool)
		want   writes
		bump   bool
	}{
		{"one attribute", func(p *inventory.Pool) { p.Devices[1] = inventorytest.Device("dev-1", "h100") }, writes{0, 1, 0}, false},
		{"two slices, no device moves", func(p *inventory.Pool) {
			p.Devices[0] = inventorytest.Device("dev-0", "h200")
			p.Devices[999] = inventorytest.Device("dev-999", "h200")
		}, writes{0, 2, 0}, false},
		{"device added where there is room", func(p *inventory.Pool) { p.Devices = append(p.Devices, inventorytest.Device("extra-0", "a100")) }, writes{0, 1, 0}, false},
		{"device removed", func(p *inventory.Pool) { p.Devices = p.Devices[1:] }, writes{0, 1, 0}, false},
		{"pool grows by a slice", func(p *inventory.Pool) { p.Devices = append(p.Devices, inventorytest.Devices("grow-", 128)...) }, writes{1, 8, 0}, true},
		{"pool shrinks by a slice", func(p *inventory.Pool) { p.Devices = p.Devices[:len(p.Devices)-128] }, writes{0, 8, 1}, true},
		{"unchanged", func(*inventory.Pool) {}, writes{}, false},
	}
	for _, st := range steps {
		before, audited := p.Stats(), auditedWrites(t, node.Name)
		gen := listSlices(t, c, node.Name)[0].Spec.Pool.Generation
		st.change(&pool)
		if err := p.Update(onePool(pool)); err != nil {
			t.Fatal(err)
		}
		slices := waitPool(t, c, node.Name, pool)
		waitSynced(t, p)
		if got := auditedWrites(t, node.Name).minus(audited); got != st.want {
			t.Errorf("%s: the audit log has %+v, want %+v", st.name, got, st.want)
		}
		if got := statsWrites(p.Stats()).minus(statsWrites(before)); got != st.want {
			t.Errorf("%s: Stats say %+v, want %+v", st.name, got, st.want)
		}
		if bumped := slices[0].Spec.Pool.Generation != gen; bumped != st.bump {
			t.Errorf("%s: generation %d -> %d, bump expected: %v", st.name, gen, slices[0].Spec.Pool.Generation, st.bump)
		}
	}
}

func TestDriftRepair(t *testing.T) {
	c := controlPlane(t)
	node, pool, p := publishedPool(t, c, "drift", 1000)
	ctx := context.Background()
	api := c.ResourceV1().ResourceSlices()

	// The kubelet's start-up wipe: every slice of the node, in one call.
	audited := auditedWrites(t, node.Name)
	wiped := time.Now()
	if err := api.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{
		FieldSelector: fields.Set{resourceapi.ResourceSliceSelectorNodeName: node.Name}.String(),
	}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, c, node.Name, pool)
	t.Logf("slices back %v after the wipe began (for information; not a test criterion)", time.Since(wiped))
	waitSynced(t, p)
	if got := auditedWrites(t, node.Name).minus(audited); got != (writes{Creates: 8}) {
		t.Errorf("after the wipe the audit log has %+v, want 8 creates", got)
	}

	// Someone edits a slice: it is put back.
	s := listSlices(t, c, node.Name)[0]
	s.Spec.Devices[0].Attributes["model"] = resourceapi.DeviceAttribute{StringValue: ptrTo("tampered")}
	if _, err := api.Update(ctx, &s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, c, node.Name, pool)

	// Someone deletes one slice: it is put back.
	if err := api.Delete(ctx, listSlices(t, c, node.Name)[1].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, c, node.Name, pool)

	// A foreign slice of this node and driver in the pool is removed.
	foreign := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "someone-elses-" + node.Name},
		Spec: resourceapi.ResourceSliceSpec{Driver: testDriver, NodeName: ptrTo(node.Name),
			Pool: resourceapi.ResourcePool{Name: "stale-pool", ResourceSliceCount: 1}},
	}
	if _, err := api.Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := api.Get(ctx, foreign.Name, metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Fatal("slice of a pool not in the inventory was never removed")
	}
}

// TestInvalidInventoryPublishesNothing: Update refuses an inventory that
// inventory.Validate refuses, with its error, and nothing is written.
func TestInvalidInventoryPublishesNothing(t *testing.T) {
	c := controlPlane(t)
	node, pool, p := publishedPool(t, c, "invalid", 10)
	audited := auditedWrites(t, node.Name)
	bad := inventory.Pool{Name: "pool-a", Devices: append(inventorytest.Devices("dev-", 10), inventorytest.Device("Bad_Name", "x"))}
	err := p.Update(onePool(bad))
	var verr *inventory.ValidationError
	if !errors.Is(err, inventory.ErrInvalid) || !errors.As(err, &verr) {
		t.Fatalf("Update accepted an invalid device name: %v", err)
	}
	waitSynced(t, p)
	if why := poolMatches(listSlices(t, c, node.Name), pool); why != "" {
		t.Fatalf("published state changed after a rejected update: %s", why)
	}
	if got := auditedWrites(t, node.Name).minus(audited); got != (writes{}) {
		t.Fatalf("a rejected update wrote %+v", got)
	}
}

// TestDroppedFieldsReportedOnce: a field the server drops (its feature gate
// is off) is reported once per slice content as a *DroppedFieldsError, and
// does not make the publisher write the slice again and again.
func TestDroppedFieldsReportedOnce(t *testing.T) {
	env := &envtest.Environment{APIServerFlags: []string{"--feature-gates=DRAConsumableCapacity=false"}}
	cfg := envtest.StartT(t, env)
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	node := createNode(t, c, "dropped")
	devices := inventorytest.Devices("dev-", 4)
	devices[0].AllowMultipleAllocations = ptrTo(true)
	var mu sync.Mutex
	var dropped []*sliceclient.DroppedFieldsError
	onError := func(err error) {
		var d *sliceclient.DroppedFieldsError
		if errors.As(err, &d) {
			mu.Lock()
			dropped = append(dropped, d)
			mu.Unlock()
		}
		t.Logf("publisher: %v", err)
	}
	inv := onePool(inventory.Pool{Name: "pool-a", Devices: devices})
	p := startPublisher(t, sliceclient.Options{Client: publisherClient(t, cfg), NodeName: node.Name, OnError: onError}, inv)
	// Resync several times with the same inventory: nothing more is written.
	for range 3 {
		if err := p.Update(inv); err != nil {
			t.Fatal(err)
		}
		waitSynced(t, p)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dropped) != 1 {
		t.Fatalf("%d dropped-field reports, want 1", len(dropped))
	}
	if d := dropped[0]; d.Sent.Spec.Devices[0].AllowMultipleAllocations == nil || d.Saved.Spec.Devices[0].AllowMultipleAllocations != nil {
		t.Errorf("the report does not show the dropped field: sent %v, saved %v",
			d.Sent.Spec.Devices[0].AllowMultipleAllocations, d.Saved.Spec.Devices[0].AllowMultipleAllocations)
	}
	if st := p.Stats(); st.Creates != 1 || st.Updates != 0 {
		t.Fatalf("stats %+v: the dropped field caused rewrites", st)
	}
	// The control plane of this test is its own: every ResourceSlice write
	// it saw was the publisher's.
	if list, err := c.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{}); err != nil || len(list.Items) != 1 || list.Items[0].Generation != 1 {
		t.Fatalf("slices on the server %v (%v), want one, never rewritten", list, err)
	}
}

// TestStartBeforeInventoryKeepsSlices: a publisher started before its
// driver reports devices must not delete the slices published by its
// previous run; once the (same) inventory arrives it writes nothing.
func TestStartBeforeInventoryKeepsSlices(t *testing.T) {
	c := controlPlane(t)
	node, pool, first := publishedPool(t, c, "start-before-inventory", 200)
	first.Stop()
	audited := auditedWrites(t, node.Name)

	p, err := sliceclient.New(sliceclient.Options{Client: publisherClient(t, nil), DriverName: testDriver, NodeName: node.Name, NodeUID: node.UID})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	waitSynced(t, p)
	if why := poolMatches(listSlices(t, c, node.Name), pool); why != "" {
		t.Fatalf("slices changed before the inventory arrived: %s", why)
	}
	if err := p.Update(onePool(pool)); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, p)
	if st := p.Stats(); st.Creates+st.Updates+st.Deletes != 0 {
		t.Fatalf("writes after the same inventory arrived: %+v", st)
	}
	if got := auditedWrites(t, node.Name).minus(audited); got != (writes{}) {
		t.Fatalf("the audit log has %+v from the publisher started before its inventory, want none", got)
	}
}

// TestDebounceHoldsABurst: with a long coalescing window, the first change
// is synced at once; a burst of changes inside the window writes nothing
// yet and leaves a sync pending (WaitForSync does not return).
func TestDebounceHoldsABurst(t *testing.T) {
	c := controlPlane(t)
	node := createNode(t, c, "debounce")
	pool := inventory.Pool{Name: "p", Devices: inventorytest.Devices("d-", 3)}
	p := startPublisher(t, sliceclient.Options{NodeName: node.Name, Debounce: time.Hour}, onePool(pool))
	if st := p.Stats(); st.Creates != 1 {
		t.Fatalf("first sync: %+v, want 1 create", st)
	}
	audited := auditedWrites(t, node.Name)
	for i := range 5 {
		pool.Devices[0] = inventorytest.Device("d-0", "model-"+string(rune('a'+i)))
		if err := p.Update(onePool(pool)); err != nil {
			t.Fatal(err)
		}
	}
	// An ended context: WaitForSync returns nil only if nothing is pending.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.WaitForSync(ended); err == nil {
		t.Fatal("the burst left no pending sync")
	}
	if st := p.Stats(); st.Updates != 0 || st.Syncs != 1 {
		t.Fatalf("inside the window: %+v", st)
	}
	if got := auditedWrites(t, node.Name).minus(audited); got != (writes{}) {
		t.Fatalf("inside the window the audit log has %+v", got)
	}
}

// TestOneCopyOfEachSlice, from the outside: the publisher drops
// managedFields from its view of the slices (sliceclient's unit test
// TestOneCopyOfEachSlice shows it keeps just the watch cache's copy), yet
// the server keeps them, since an update sent without managedFields leaves
// them as they were; and the update is the only write.
func TestOneCopyOfEachSlice(t *testing.T) {
	c := controlPlane(t)
	w, err := sliceclient.NewWatcher(publisherClient(t, nil), testDriver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	node := createNode(t, c, "one-copy")
	pool := inventory.Pool{Name: "pool-a", Devices: inventorytest.Devices("dev-", 300)} // three slices
	p := startPublisher(t, sliceclient.Options{NodeName: node.Name, NodeUID: node.UID, Watcher: w}, onePool(pool))
	audited := auditedWrites(t, node.Name)
	pool.Devices[0] = inventorytest.Device(pool.Devices[0].Name, "changed")
	if err := p.Update(onePool(pool)); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, p)
	waitPool(t, c, node.Name, pool)
	if got := auditedWrites(t, node.Name).minus(audited); got != (writes{Updates: 1}) {
		t.Fatalf("the audit log has %+v, want one update", got)
	}
	for _, s := range listSlices(t, c, node.Name) {
		if len(s.ManagedFields) == 0 {
			t.Errorf("slice %s has no managedFields on the server", s.Name)
		}
	}
}
