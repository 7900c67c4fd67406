package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/dranode/dranode/tools/envtest"
)

// Bounds that make check holds, counted (not timed) on every run. A change
// that adds a request to a claim's path or a watch to a node fails here;
// one that removes some should lower the bound.
const (
	// Per claim (prepare + unprepare), requests of the agent: one quorum
	// GET of the claim, and the device status written after prepare and
	// removed after unprepare (issue 24 deliverable 2 aims at one write).
	maxAgentRequestsPerClaim = 3
	maxAgentWritesPerClaim   = 2
	// Watches a node's agent keeps open: its own slices.
	maxAgentWatchesPerNode = 1
)

type settings struct {
	nodes, claims, parallel int
	rest                    time.Duration
	report                  string
}

func envSettings(t *testing.T) settings {
	s := settings{nodes: 3, claims: 2, parallel: 8, rest: 5 * time.Second, report: os.Getenv("FLEET_REPORT")}
	for _, v := range []struct {
		name string
		dst  *int
	}{{"FLEET_NODES", &s.nodes}, {"FLEET_CLAIMS", &s.claims}, {"FLEET_PARALLEL", &s.parallel}} {
		if raw := os.Getenv(v.name); raw != "" {
			n, err := strconv.Atoi(raw)
			if err != nil || n < 1 {
				t.Fatalf("%s=%q: want a positive integer", v.name, raw)
			}
			*v.dst = n
		}
	}
	if raw := os.Getenv("FLEET_REST"); raw != "" {
		d, err := time.ParseDuration(raw)
		if err != nil || d <= 0 {
			t.Fatalf("FLEET_REST=%q: want a positive duration (e.g. 10m)", raw)
		}
		s.rest = d
	}
	return s
}

// phase is a stretch of the audit log.
type phase struct {
	name     string
	from, to int64
}

// TestFleet runs FLEET_NODES nodes of dranode-agent and as many of the
// upstream helper (the piecemeal driver) on one control plane, through
// start, prepare, rest, a rolling restart, an API server restart and
// unprepare, and reports what each node cost the API server in each phase
// (README.md). It holds the goals that do not depend on timing: no writes
// at rest, on the rolling restart (hand-over) or after the API server
// restart; the requests per claim and the watches per node within bounds.
func TestFleet(t *testing.T) {
	s := envSettings(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if dl, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-30*time.Second))
		defer cancel()
	}
	t.Logf("fleet: %d nodes per driver, %d claims per node, rest %v", s.nodes, s.claims, s.rest)

	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// Short: unix socket paths are limited to 107 bytes.
	base, err := os.MkdirTemp("", "fl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	bins, err := Build(root, filepath.Join(base))
	if err != nil {
		t.Fatal(err)
	}

	env := &envtest.Environment{Scheduler: true, Audit: true, AuditPolicy: AuditPolicy}
	admin := envtest.StartT(t, env)
	audit := Audit{Path: env.AuditLogPath()}
	admin.QPS, admin.Burst = 500, 1000
	client, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, ctx, client)
	const ns = "fleet"
	if err := setup(ctx, client, ns); err != nil {
		t.Fatal(err)
	}

	var nodes []*Node
	for _, kind := range []Kind{KindAgent, KindUpstream} {
		for i := 1; i <= s.nodes; i++ {
			name := fmt.Sprintf("%c%d", kind[0], i)
			if err := CreateNode(ctx, client, name); err != nil {
				t.Fatal(err)
			}
			n, err := NewNode(name, kind, 8, filepath.Join(base, name), bins, admin)
			if err != nil {
				t.Fatal(err)
			}
			nodes = append(nodes, n)
			t.Cleanup(func() {
				if t.Failed() && len(n.Instances) > 0 {
					t.Logf("node %s, last lines of its driver's log:\n%s", n.Name, n.Current().LogTail(15))
				}
			})
			t.Cleanup(n.Stop)
		}
	}
	var phases []phase
	mark := func() int64 {
		off, err := audit.Offset()
		if err != nil {
			t.Fatal(err)
		}
		return off
	}
	run := func(name string, fn func(n *Node) error) phase {
		t.Helper()
		start := time.Now()
		p := phase{name: name, from: mark()}
		if err := forEach(ctx, nodes, s.parallel, fn); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p.to = mark()
		t.Logf("phase %s: %v", name, time.Since(start).Round(time.Millisecond))
		phases = append(phases, p)
		return p
	}

	// Start: the driver registers with its kubelet, publishes its slices
	// and, for the agent, is ready.
	run("start", func(n *Node) error {
		if _, err := n.StartInstance(); err != nil {
			return err
		}
		if _, err := n.Register(ctx); err != nil {
			return err
		}
		if err := n.WaitReady(ctx); err != nil {
			return err
		}
		return w.waitFor(ctx, "slices of "+n.Name, func() (bool, string) {
			got := w.devices(n.Name, n.Driver())
			return got == n.Devices, fmt.Sprintf("%d of %d devices published", got, n.Devices)
		})
	})

	// Claims allocated by the scheduler, before any is prepared: the
	// scheduler's work is not the node's.
	claims := map[string][]Claim{}
	var claimsMu sync.Mutex
	if err := forEach(ctx, nodes, s.parallel, func(n *Node) error {
		var mine []Claim
		for i := 0; i < s.claims; i++ {
			c, err := schedule(ctx, client, w, ns, n, fmt.Sprintf("%s-%d", n.Name, i))
			if err != nil {
				return err
			}
			mine = append(mine, c)
		}
		claimsMu.Lock()
		claims[n.Name] = mine
		claimsMu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Prepare: one call per claim, as the kubelet makes one per pod; the
	// phase ends once the agent's device status (written off the call's
	// path) is in every claim.
	prepare := run("prepare", func(n *Node) error {
		for _, c := range claims[n.Name] {
			if err := n.Kubelet.Prepare(ctx, c); err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
		}
		if n.Kind != KindAgent {
			return nil
		}
		if err := w.waitFor(ctx, "device status of "+n.Name+"'s claims", func() (bool, string) {
			for _, c := range claims[n.Name] {
				if !w.hasStatus(ns, c.Name, n.Driver()) {
					return false, c.Name + " has no device status of " + n.Driver()
				}
			}
			return true, ""
		}); err != nil {
			return err
		}
		// The API server audits a write after its response and its watch
		// event went out: the status is seen before its patch is logged,
		// which would count the patch into the rest that follows.
		return waitWrites(ctx, audit, n.Name, claims[n.Name])
	})

	// At rest: nothing happens but what the drivers do by themselves.
	restFrom := mark()
	before := usage(t, nodes)
	select {
	case <-time.After(s.rest): // the observation window is what is measured
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	after := usage(t, nodes)
	rest := phase{name: "rest", from: restFrom, to: mark()}
	phases = append(phases, rest)

	// Rolling restart of every driver: the agent's new instance takes the
	// record over before the old one stops (maxSurge 1); the upstream
	// driver, without hand-over, stops before its successor starts.
	upgrade := run("rolling restart", func(n *Node) error {
		old := n.Current()
		if n.Kind == KindUpstream {
			old.Stop()
		}
		if _, err := n.StartInstance(); err != nil {
			return err
		}
		if _, err := n.Register(ctx); err != nil {
			return err
		}
		if err := n.WaitReady(ctx); err != nil {
			return err
		}
		old.Stop()
		return nil
	})

	// API server restart: every node's watches come back.
	restWatches := OpenWatches(mustEvents(t, audit), rest.to)
	apiFrom := mark()
	if err := env.RestartAPIServer(); err != nil {
		t.Fatal(err)
	}
	apiReady := mark()
	// From before the restart: the API server may serve a watch before its
	// /readyz says so.
	if err := waitWatches(ctx, audit, apiFrom, restWatches); err != nil {
		t.Fatal(err)
	}
	apiRestart := phase{name: "API server restart", from: apiFrom, to: mark()}
	phases = append(phases, apiRestart)

	unprepare := run("unprepare", func(n *Node) error {
		for _, c := range claims[n.Name] {
			if err := n.Kubelet.Unprepare(ctx, c); err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
		}
		// No wait for the device status to go: the agent writes none on
		// unprepare; the API server drops it with the claim's allocation.
		return nil
	})

	events := mustEvents(t, audit)
	r := newReport(s, nodes, events, phases, restWatches, after, before)
	r.claims = claimCost(events, nodes, prepare, unprepare, s.claims)
	peakAgent, totalAgent := PeakPerSecond(events, apiFrom, apiRestart.to, func(n string) bool { return n[0] == 'a' })
	peakUp, totalUp := PeakPerSecond(events, apiFrom, apiRestart.to, func(n string) bool { return n[0] == 'u' })
	t.Logf("API server restart: ready after %d bytes of audit log", apiReady-apiFrom)
	r.reconnect = fmt.Sprintf("reconnect requests after the API server restart: agent fleet %d, peak %d in 1 s, per second %v; upstream fleet %d, peak %d in 1 s, per second %v",
		totalAgent, peakAgent, PerSecond(events, apiFrom, apiRestart.to, func(n string) bool { return n[0] == 'a' }),
		totalUp, peakUp, PerSecond(events, apiFrom, apiRestart.to, func(n string) bool { return n[0] == 'u' }))
	text := r.String()
	t.Log("\n" + text)
	if s.report != "" {
		if err := os.WriteFile(s.report, []byte(text), 0o644); err != nil {
			t.Error(err)
		}
	}

	// The reconnect bound stated in README.md before it was measured: at
	// N >= 20, no second holds more than half of the fleet's reconnects.
	// Below that a second may hold them all by chance.
	if s.nodes >= 20 && 2*peakAgent > totalAgent {
		t.Errorf("after the API server restart, %d of the agent fleet's %d reconnect requests came within one second, want at most half (README.md, \"The reconnect bound\")", peakAgent, totalAgent)
	}

	// The goals that do not depend on timing.
	for _, n := range nodes {
		if n.Kind != KindAgent {
			continue
		}
		for _, p := range []phase{rest, upgrade, apiRestart} {
			c := PerNode(events, p.from, p.to)[n.Name]
			if w := c.Writes(); w != 0 {
				t.Errorf("node %s: %d writes during %s, want 0: %v", n.Name, w, p.name, c)
			}
		}
		if got := restWatches[n.Name].Total(); got > maxAgentWatchesPerNode || got == 0 {
			t.Errorf("node %s: %d watches open at rest (%v), want 1..%d", n.Name, got, restWatches[n.Name], maxAgentWatchesPerNode)
		}
		perClaim := PerNode(events, prepare.from, prepare.to)[n.Name]
		for k, v := range PerNode(events, unprepare.from, unprepare.to)[n.Name] {
			perClaim[k] += v
		}
		if perClaim == nil {
			perClaim = Counts{}
		}
		if got := perClaim.Total(); got > maxAgentRequestsPerClaim*s.claims {
			t.Errorf("node %s: %d requests for %d claims (%v), want at most %d per claim", n.Name, got, s.claims, perClaim, maxAgentRequestsPerClaim)
		}
		if got := perClaim.Writes(); got > maxAgentWritesPerClaim*s.claims {
			t.Errorf("node %s: %d writes for %d claims (%v), want at most %d per claim", n.Name, got, s.claims, perClaim, maxAgentWritesPerClaim)
		}
	}
}

func mustEvents(t *testing.T, a Audit) []AuditEvent {
	t.Helper()
	events, err := a.Events()
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// forEach runs fn for every node, at most parallel at a time, and returns
// the first error.
func forEach(ctx context.Context, nodes []*Node, parallel int, fn func(*Node) error) error {
	sem := make(chan struct{}, parallel)
	errs := make(chan error, len(nodes))
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs <- ctx.Err()
				return
			}
			defer func() { <-sem }()
			if err := fn(n); err != nil {
				errs <- fmt.Errorf("node %s: %w", n.Name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// usage reads every node's driver process and its children (the agent's
// plugin) from /proc.
func usage(t *testing.T, nodes []*Node) map[string][2]Usage {
	t.Helper()
	out := map[string][2]Usage{}
	for _, n := range nodes {
		pid := n.Current().PID()
		main, err := ReadUsage(pid)
		if err != nil {
			t.Fatal(err)
		}
		var kids Usage
		children, err := Children(pid)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range children {
			u, err := ReadUsage(c)
			if err != nil {
				continue // gone meanwhile
			}
			kids.CPU += u.CPU
			kids.RSS += u.RSS
			kids.Anon += u.Anon
		}
		out[n.Name] = [2]Usage{main, kids}
	}
	return out
}

func setup(ctx context.Context, client kubernetes.Interface, ns string) error {
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// No controller-manager: the pods need their default ServiceAccount.
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, driver := range []string{AgentDriver, UpstreamDriver} {
		class := &resourcev1.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: driver},
			Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
				CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)},
			}}},
		}
		if _, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// schedule creates a claim for one device of the node's driver and a pod
// on the node that uses it, and waits until the scheduler allocated the
// claim and reserved it for the pod.
func schedule(ctx context.Context, client kubernetes.Interface, w *watcher, ns string, n *Node, name string) (Claim, error) {
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: n.Driver()},
		}}}},
	}
	created, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		return Claim{}, err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector:   map[string]string{NodeLabel: n.Name},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &name}},
			Containers: []corev1.Container{{
				Name: "c", Image: "none",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
			}},
		},
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return Claim{}, err
	}
	err = w.waitFor(ctx, "allocation of claim "+name, func() (bool, string) {
		c := w.claim(ns, name)
		if c == nil || c.Status.Allocation == nil || len(c.Status.ReservedFor) == 0 {
			return false, "not allocated and reserved"
		}
		return true, ""
	})
	return Claim{Namespace: ns, Name: name, UID: string(created.UID)}, err
}

// waitWatches waits until every node has at least the watches it had open
// at rest established again after offset from, reading the audit log
// whenever it grows.
func waitWatches(ctx context.Context, a Audit, from int64, want map[string]Counts) error {
	var last string
	for {
		events, err := a.Events()
		if err != nil {
			return err
		}
		back := PerNode(events, from, 1<<62)
		missing := []string{}
		for node, kinds := range want {
			for k, v := range kinds {
				if back[node][k] < v {
					missing = append(missing, fmt.Sprintf("%s %s %d/%d", node, k, back[node][k], v))
				}
			}
		}
		if len(missing) == 0 {
			return nil
		}
		sort.Strings(missing)
		last = strings.Join(missing, ", ")
		select {
		case <-ctx.Done():
			return fmt.Errorf("watches not back after the API server restart (%s): %w", last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitWrites waits until the audit log holds a successful write by
// node's driver to each of claims, reading the log whenever it grows.
func waitWrites(ctx context.Context, a Audit, node string, claims []Claim) error {
	for {
		events, err := a.Events()
		if err != nil {
			return err
		}
		written := map[string]bool{}
		for _, ev := range events {
			if ev.Node() == node && ev.IsWrite() && ev.isRequest() &&
				ev.ObjectRef != nil && ev.ObjectRef.Resource == "resourceclaims" &&
				ev.ResponseStatus != nil && ev.ResponseStatus.Code < 300 {
				written[ev.ObjectRef.Namespace+"/"+ev.ObjectRef.Name] = true
			}
		}
		var missing []string
		for _, c := range claims {
			if !written[c.Namespace+"/"+c.Name] {
				missing = append(missing, c.Name)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: no write of the device status of %s in the audit log: %w", node, strings.Join(missing, ", "), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// watcher follows slices and claims through informers (the harness's own
// client, not a node's), so that waits wake on events.
type watcher struct {
	slices, claims cache.Indexer
	mu             sync.Mutex
	changed        chan struct{}
}

func startWatch(t *testing.T, ctx context.Context, client kubernetes.Interface) *watcher {
	w := &watcher{changed: make(chan struct{})}
	f := informers.NewSharedInformerFactory(client, 0)
	si := f.Resource().V1().ResourceSlices().Informer()
	ci := f.Resource().V1().ResourceClaims().Informer()
	for _, inf := range []cache.SharedIndexInformer{si, ci} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { w.notify() },
			UpdateFunc: func(any, any) { w.notify() },
			DeleteFunc: func(any) { w.notify() },
		}); err != nil {
			t.Fatal(err)
		}
	}
	w.slices, w.claims = si.GetIndexer(), ci.GetIndexer()
	stop := make(chan struct{})
	f.Start(stop)
	t.Cleanup(func() { close(stop); f.Shutdown() })
	f.WaitForCacheSync(ctx.Done())
	return w
}

func (w *watcher) notify() {
	w.mu.Lock()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

func (w *watcher) waitFor(ctx context.Context, what string, cond func() (bool, string)) error {
	for {
		w.mu.Lock()
		ch := w.changed
		w.mu.Unlock()
		ok, state := cond()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s (%s): %w", what, state, ctx.Err())
		}
	}
}

func (w *watcher) devices(node, driver string) int {
	n := 0
	for _, o := range w.slices.List() {
		s := o.(*resourcev1.ResourceSlice)
		if s.Spec.NodeName != nil && *s.Spec.NodeName == node && s.Spec.Driver == driver {
			n += len(s.Spec.Devices)
		}
	}
	return n
}

func (w *watcher) claim(ns, name string) *resourcev1.ResourceClaim {
	o, ok, _ := w.claims.GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	return o.(*resourcev1.ResourceClaim)
}

func (w *watcher) hasStatus(ns, name, driver string) bool {
	c := w.claim(ns, name)
	if c == nil {
		return false
	}
	for _, d := range c.Status.Devices {
		if d.Driver == driver {
			return true
		}
	}
	return false
}
