package sliceclient

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dranode/dranode/tools/envtest"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// One control plane serves every integration test in the package; each test
// uses its own Node, so they do not see each other's slices.
var (
	envOnce   sync.Once
	envShared *envtest.Environment
	envClient kubernetes.Interface
	envConfig *rest.Config // for tests that need a client of their own
	envErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if envShared != nil {
		if err := envShared.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}
	os.Exit(code)
}

// controlPlane fails the test (never skips) when the control plane cannot
// start, with envtest's message saying where binaries were looked for.
func controlPlane(t *testing.T) kubernetes.Interface {
	t.Helper()
	envOnce.Do(func() {
		envShared = &envtest.Environment{}
		cfg, err := envShared.Start()
		if err != nil {
			envErr = fmt.Errorf("starting the control plane (build it with `make -C <repo> controlplane`): %w", err)
			envShared = nil
			return
		}
		cfg.QPS, cfg.Burst = -1, -1
		envConfig = cfg
		envClient, envErr = kubernetes.NewForConfig(cfg)
	})
	if envErr != nil {
		t.Fatal(envErr)
	}
	return envClient
}

// nodeSeq makes node names unique within the test binary, whose control
// plane outlives one run of a test (go test -count=N).
var nodeSeq atomic.Int64

// createNode creates a Node named after name, with a suffix that keeps it
// apart from the Nodes of earlier runs; use the returned Node's name.
func createNode(t *testing.T, c kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	name = fmt.Sprintf("%s-%d", name, nodeSeq.Add(1))
	node, err := c.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Node %s: %v", name, err)
	}
	return node
}

func startPublisher(t *testing.T, c kubernetes.Interface, node string, inv Inventory, onError func(error)) *Publisher {
	t.Helper()
	if onError == nil {
		onError = func(err error) { t.Logf("publisher: %v", err) }
	}
	p, err := New(Options{Client: clientOf(c), DriverName: testDriver, NodeName: node, OnError: onError})
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

func waitSynced(t *testing.T, p *Publisher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
}

func listSlices(t *testing.T, c kubernetes.Interface, node string) []resourceapi.ResourceSlice {
	t.Helper()
	list, err := c.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.Set{resourceapi.ResourceSliceSelectorNodeName: node}.String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// poolMatches reports why the stored slices are not exactly inv's pool, or
// "" when they are: one generation, the right count, every device once with
// the wanted content.
func poolMatches(slices []resourceapi.ResourceSlice, pool Pool) string {
	if len(slices) == 0 {
		return "no slices"
	}
	gen, count := slices[0].Spec.Pool.Generation, slices[0].Spec.Pool.ResourceSliceCount
	if int64(len(slices)) != count {
		return fmt.Sprintf("%d slices, pool says %d", len(slices), count)
	}
	got := map[string]resourceapi.Device{}
	for _, s := range slices {
		if s.Spec.Pool.Generation != gen || s.Spec.Pool.Name != pool.Name {
			return "mixed generations or pools"
		}
		for _, d := range s.Spec.Devices {
			got[d.Name] = d
		}
	}
	if len(got) != len(pool.Devices) {
		return fmt.Sprintf("%d devices stored, want %d", len(got), len(pool.Devices))
	}
	for _, d := range pool.Devices {
		if !apiequality.Semantic.DeepEqual(got[d.Name], d) {
			return "device " + d.Name + " differs"
		}
	}
	return ""
}

func waitPool(t *testing.T, c kubernetes.Interface, node string, pool Pool) []resourceapi.ResourceSlice {
	t.Helper()
	var slices []resourceapi.ResourceSlice
	why := ""
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		slices = listSlices(t, c, node)
		why = poolMatches(slices, pool)
		return why == "", nil
	})
	if err != nil {
		t.Fatalf("stored slices never matched the pool: %s", why)
	}
	return slices
}

func TestIntegrationPublishRestartAndOwner(t *testing.T) {
	c := controlPlane(t)
	node := createNode(t, c, "publish-restart")
	pool := Pool{Name: "pool-a", Devices: testDevices("dev-", 1000)}
	inv := Inventory{Pools: []Pool{pool}}

	p := startPublisher(t, c, node.Name, inv, nil)
	slices := waitPool(t, c, node.Name, pool)
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
	if st := p.Stats(); st.Creates != 8 || st.Updates != 0 || st.Deletes != 0 {
		t.Errorf("initial publish stats %+v, want 8 creates only", st)
	}
	p.Stop()

	// A restart with the same devices finds its slices and writes nothing.
	p2 := startPublisher(t, c, node.Name, inv, nil)
	if st := p2.Stats(); st.Creates+st.Updates+st.Deletes != 0 {
		t.Errorf("restart wrote: %+v", st)
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

func TestIntegrationMinimalWrites(t *testing.T) {
	c := controlPlane(t)
	node := createNode(t, c, "minimal-writes")
	pool := Pool{Name: "pool-a", Devices: testDevices("dev-", 1000)}
	p := startPublisher(t, c, node.Name, Inventory{Pools: []Pool{pool}}, nil)
	waitPool(t, c, node.Name, pool)

	steps := []struct {
		name                      string
		change                    func(*Pool)
		creates, updates, deletes int64
		bump                      bool
	}{
		{"one attribute", func(p *Pool) { p.Devices[1] = testDevice("dev-1", "h100") }, 0, 1, 0, false},
		{"two slices, no device moves", func(p *Pool) {
			p.Devices[0] = testDevice("dev-0", "h200")
			p.Devices[999] = testDevice("dev-999", "h200")
		}, 0, 2, 0, false},
		{"device added where there is room", func(p *Pool) { p.Devices = append(p.Devices, testDevice("extra-0", "a100")) }, 0, 1, 0, false},
		{"device removed", func(p *Pool) { p.Devices = p.Devices[1:] }, 0, 1, 0, false},
		{"pool grows by a slice", func(p *Pool) { p.Devices = append(p.Devices, testDevices("grow-", 128)...) }, 1, 8, 0, true},
		{"pool shrinks by a slice", func(p *Pool) { p.Devices = p.Devices[:len(p.Devices)-128] }, 0, 8, 1, true},
		{"unchanged", func(*Pool) {}, 0, 0, 0, false},
	}
	for _, st := range steps {
		before := p.Stats()
		gen := listSlices(t, c, node.Name)[0].Spec.Pool.Generation
		st.change(&pool)
		if err := p.Update(Inventory{Pools: []Pool{pool}}); err != nil {
			t.Fatal(err)
		}
		slices := waitPool(t, c, node.Name, pool)
		waitSynced(t, p)
		after := p.Stats()
		if d := [3]int64{after.Creates - before.Creates, after.Updates - before.Updates, after.Deletes - before.Deletes}; d != [3]int64{st.creates, st.updates, st.deletes} {
			t.Errorf("%s: creates/updates/deletes %v, want %v", st.name, d, [3]int64{st.creates, st.updates, st.deletes})
		}
		if bumped := slices[0].Spec.Pool.Generation != gen; bumped != st.bump {
			t.Errorf("%s: generation %d -> %d, bump expected: %v", st.name, gen, slices[0].Spec.Pool.Generation, st.bump)
		}
	}
}

func TestIntegrationDriftRepair(t *testing.T) {
	c := controlPlane(t)
	node := createNode(t, c, "drift")
	pool := Pool{Name: "pool-a", Devices: testDevices("dev-", 1000)}
	p := startPublisher(t, c, node.Name, Inventory{Pools: []Pool{pool}}, nil)
	waitPool(t, c, node.Name, pool)
	ctx := context.Background()
	api := c.ResourceV1().ResourceSlices()

	// The kubelet's start-up wipe: every slice of the node, in one call.
	before := p.Stats()
	wiped := time.Now()
	if err := api.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{
		FieldSelector: fields.Set{resourceapi.ResourceSliceSelectorNodeName: node.Name}.String(),
	}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, c, node.Name, pool)
	t.Logf("slices back %v after the wipe began (for information; not a test criterion)", time.Since(wiped))
	waitSynced(t, p)
	if got := p.Stats().Creates - before.Creates; got != 8 {
		t.Errorf("after the wipe: %d creates, want 8", got)
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
		ObjectMeta: metav1.ObjectMeta{Name: "someone-elses"},
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

func TestIntegrationInvalidInventoryPublishesNothing(t *testing.T) {
	c := controlPlane(t)
	node := createNode(t, c, "invalid")
	pool := Pool{Name: "pool-a", Devices: testDevices("dev-", 10)}
	p := startPublisher(t, c, node.Name, Inventory{Pools: []Pool{pool}}, nil)
	waitPool(t, c, node.Name, pool)
	bad := Pool{Name: "pool-a", Devices: append(testDevices("dev-", 10), testDevice("Bad_Name", "x"))}
	err := p.Update(Inventory{Pools: []Pool{bad}})
	var verr *ValidationError
	if !errors.Is(err, ErrInvalidInventory) || !errors.As(err, &verr) {
		t.Fatalf("Update accepted an invalid device name: %v", err)
	}
	waitSynced(t, p)
	if why := poolMatches(listSlices(t, c, node.Name), pool); why != "" {
		t.Fatalf("published state changed after a rejected update: %s", why)
	}
}

// Whatever ValidateInventory accepts, the API server accepts (server-side
// dry run of the slices a publisher would create), and the server rejects
// what it rejects for the rules both check.
func TestIntegrationValidationAgreesWithServer(t *testing.T) {
	c := controlPlane(t)
	for _, tt := range validationCases() {
		t.Run(tt.name, func(t *testing.T) {
			ours := ValidateInventory(Inventory{Pools: []Pool{tt.pool}})
			if (ours == nil) != tt.valid {
				t.Fatalf("ValidateInventory = %v, want valid=%v", ours, tt.valid)
			}
			slices, err := DryRun{DriverName: testDriver, NodeName: "validation"}.Slices(Inventory{Pools: []Pool{tt.pool}})
			if ours == nil && err != nil {
				t.Fatal(err)
			}
			if ours != nil {
				// Build the slice without our validation to ask the server.
				pl := planner{driver: testDriver, node: "validation"}
				for _, w := range pl.plan(tt.pool.Name, newDesiredPool(tt.pool), nil, nil).creates {
					slices = append(slices, w.obj)
				}
			}
			var serverErr error
			for _, s := range slices {
				s.OwnerReferences = nil
				if _, err := c.ResourceV1().ResourceSlices().Create(context.Background(), s, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
					serverErr = err
				}
			}
			if ours == nil && serverErr != nil {
				t.Fatalf("we accept, the server rejects: %v", serverErr)
			}
			if ours != nil && tt.serverRejects && serverErr == nil {
				t.Fatalf("we reject (%v), the server accepts", ours)
			}
		})
	}
}

func TestIntegrationDroppedFieldsReportedOnce(t *testing.T) {
	env := &envtest.Environment{APIServerFlags: []string{"--feature-gates=DRAConsumableCapacity=false"}}
	cfg := envtest.StartT(t, env)
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	node := createNode(t, c, "dropped")
	devices := testDevices("dev-", 4)
	devices[0].AllowMultipleAllocations = ptrTo(true)
	var mu sync.Mutex
	var dropped []*DroppedFieldsError
	onError := func(err error) {
		var d *DroppedFieldsError
		if errors.As(err, &d) {
			mu.Lock()
			dropped = append(dropped, d)
			mu.Unlock()
		}
		t.Logf("publisher: %v", err)
	}
	inv := Inventory{Pools: []Pool{{Name: "pool-a", Devices: devices}}}
	p := startPublisher(t, c, node.Name, inv, onError)
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
	if st := p.Stats(); st.Creates != 1 || st.Updates != 0 {
		t.Fatalf("stats %+v: the dropped field caused rewrites", st)
	}
}

// A publisher started before its driver reports devices must not delete the
// slices published by its previous run; once the (same) inventory arrives it
// writes nothing.
func TestIntegrationStartBeforeInventoryKeepsSlices(t *testing.T) {
	c := controlPlane(t)
	node := createNode(t, c, "start-before-inventory")
	pool := Pool{Name: "pool-a", Devices: testDevices("dev-", 200)}
	inv := Inventory{Pools: []Pool{pool}}
	first := startPublisher(t, c, node.Name, inv, nil)
	waitPool(t, c, node.Name, pool)
	first.Stop()

	p, err := New(Options{Client: clientOf(c), DriverName: testDriver, NodeName: node.Name, NodeUID: node.UID})
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
	if err := p.Update(inv); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, p)
	if st := p.Stats(); st.Creates+st.Updates+st.Deletes != 0 {
		t.Fatalf("writes after the same inventory arrived: %+v", st)
	}
}
