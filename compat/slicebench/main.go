package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/sliceclient"
	"github.com/dranode/dranode/tools/envtest"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

const poolName = "pool"

func main() {
	rounds := flag.Int("rounds", 3, "repetitions of every scenario; the table shows medians")
	nodes := flag.Int("nodes", 100, "nodes in the many-nodes scenario")
	only := flag.String("only", "", "comma-separated implementations to run (default: all)")
	manyOnly := flag.Bool("many-only", false, "run only the many-nodes scenario")
	flag.BoolVar(&benchFlags.nodeUID, "node-uid", false, "give both implementations the Node's UID (no Node GET at start)")
	flag.BoolVar(&benchFlags.sharedWatch, "shared-watch", false, "many-nodes scenario: sliceclient's publishers share one sliceclient.Watcher")
	flag.BoolVar(&benchFlags.trace, "trace", false, "many-nodes scenario: print a per-request trace summary to stderr")
	flag.StringVar(&benchFlags.apiserverProfile, "apiserver-cpuprofile", "", "many-nodes scenario: write a 3 s CPU profile of the API server, taken from just before the start, to this file (suffixed with the implementation and round)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (this process only, not the API server) to this file")
	slowWipeRounds := flag.Int("slow-wipe-rounds", 1, "rounds that include the wipe scenario for upstream with its default 30 s sync delay")
	flag.IntVar(&benchFlags.writesInFlight, "writes-in-flight", 4, `sliceclient.MaxWritesInFlight of the "sliceclient(bounded writes)" implementation (run only when named in -only; its publishers always share a Watcher)`)
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "slicebench:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "slicebench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	klog.SetOutput(devNull())
	klog.LogToStderr(false)
	if err := run(*rounds, *nodes, *slowWipeRounds, *only, *manyOnly); err != nil {
		fmt.Fprintln(os.Stderr, "slicebench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// benchFlags are the flags that change how publishers are started.
var benchFlags struct {
	nodeUID, sharedWatch, trace bool
	apiserverProfile            string
	writesInFlight              int
}

// profileAPIServer asks the API server for a CPU profile of the next
// seconds and writes it to path; the returned channel is closed when done.
func profileAPIServer(ctx context.Context, admin kubernetes.Interface, path string, seconds int) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(seconds)).DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(path, raw, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "API server profile:", err)
		}
	}()
	return done
}

// uidFor is what a publisher is told about node's UID: nothing unless
// -node-uid, the same for both implementations.
func uidFor(node *corev1.Node) types.UID {
	if benchFlags.nodeUID {
		return node.UID
	}
	return ""
}

func devNull() *os.File {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return os.Stderr
	}
	return f
}

// counts are requests by verb, counted by a wrapping transport.
type counts struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *counts) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

type countingTransport struct {
	next http.RoundTripper
	c    *counts
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	verb := "other"
	isSlice := strings.Contains(req.URL.Path, "/resourceslices")
	named := isSlice && !strings.HasSuffix(req.URL.Path, "/resourceslices")
	switch req.Method {
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true":
			verb = "watch"
		case named || !isSlice:
			verb = "get"
		default:
			verb = "list"
		}
	}
	t.c.mu.Lock()
	if t.c.m == nil {
		t.c.m = map[string]int64{}
	}
	t.c.m[verb]++
	t.c.mu.Unlock()
	if !tracing.Load() {
		return t.next.RoundTrip(req)
	}
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	traceMu.Lock()
	traced = append(traced, tracedRequest{verb: verb, start: start, took: time.Since(start)})
	traceMu.Unlock()
	return resp, err
}

// The per-request trace of the many-nodes start (-trace): when each request
// was sent and how long until its response headers came back (for a watch,
// until the stream opened).
type tracedRequest struct {
	verb  string
	start time.Time
	took  time.Duration
}

var (
	tracing atomic.Bool
	traceMu sync.Mutex
	traced  []tracedRequest
)

// printTrace summarises the requests traced since t0, by verb: how many,
// when the first was sent and the last answered, and the latencies.
func printTrace(name string, t0, t1 time.Time) {
	traceMu.Lock()
	reqs := traced
	traced = nil
	traceMu.Unlock()
	byVerb := map[string][]tracedRequest{}
	var verbs []string
	for _, r := range reqs {
		if byVerb[r.verb] == nil {
			verbs = append(verbs, r.verb)
		}
		byVerb[r.verb] = append(byVerb[r.verb], r)
	}
	fmt.Fprintf(os.Stderr, "trace %s: started at %.2f (unix), converged after %v\n", name, float64(t0.UnixMilli())/1000, t1.Sub(t0).Round(time.Millisecond))
	for _, v := range verbs {
		rs := byVerb[v]
		lat := make([]time.Duration, len(rs))
		first, last := rs[0].start, rs[0].start.Add(rs[0].took)
		for i, r := range rs {
			lat[i] = r.took
			if r.start.Before(first) {
				first = r.start
			}
			if end := r.start.Add(r.took); end.After(last) {
				last = end
			}
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		fmt.Fprintf(os.Stderr, "  %-7s n=%-4d first sent +%-8v last answered +%-8v latency p50 %-8v p90 %-8v max %v\n",
			v, len(rs), first.Sub(t0).Round(time.Millisecond), last.Sub(t0).Round(time.Millisecond),
			lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*9/10].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	}
}

// countingClient is a client that counts its requests.
func countingClient(cfg *rest.Config) (kubernetes.Interface, *counts, error) {
	c := &counts{}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, -1
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt, c: c} }
	cs, err := kubernetes.NewForConfig(cfg)
	return cs, c, err
}

// publisher is what the scenarios drive; one adapter per implementation.
type publisher interface {
	// start publishes for node; uid is the Node's UID, or "" to let the
	// publisher read the Node for it.
	start(ctx context.Context, node string, uid types.UID, slices [][]resourceapi.Device) error
	update(slices [][]resourceapi.Device)
	// waitIdle waits until the sync caused by the last update is done.
	waitIdle(ctx context.Context) error
	stop()
}

type impl struct {
	name   string
	driver string
}

// --- sliceclient ---

type scPub struct {
	c       kubernetes.Interface
	driver  string
	watcher *sliceclient.Watcher // shared by the publishers of the many-nodes scenario, when -shared-watch
	// maxWrites > 0: the many-nodes publishers share a Watcher with
	// MaxWritesInFlight(maxWrites), with or without -shared-watch.
	maxWrites int
	p         *sliceclient.Publisher
}

func flat(slices [][]resourceapi.Device) inventory.Inventory {
	var devs []resourceapi.Device
	for _, s := range slices {
		devs = append(devs, s...)
	}
	return inventory.Inventory{Pools: []inventory.Pool{{Name: poolName, Devices: devs}}}
}

func (s *scPub) start(ctx context.Context, node string, uid types.UID, slices [][]resourceapi.Device) error {
	p, err := sliceclient.New(sliceclient.Options{Client: sliceClient(s.c), DriverName: s.driver, NodeName: node, NodeUID: uid, Watcher: s.watcher})
	if err != nil {
		return err
	}
	if err := p.Update(flat(slices)); err != nil {
		return err
	}
	s.p = p
	t := time.Now()
	if err := p.Start(ctx); err != nil {
		return err
	}
	if tracing.Load() {
		// Not a request: how long Start took (Node GET, list, watch).
		traceMu.Lock()
		traced = append(traced, tracedRequest{verb: "(Start)", start: t, took: time.Since(t)})
		traceMu.Unlock()
	}
	return p.WaitForSync(ctx)
}

func (s *scPub) update(slices [][]resourceapi.Device) {
	if err := s.p.Update(flat(slices)); err != nil {
		panic(err)
	}
}
func (s *scPub) waitIdle(ctx context.Context) error { return s.p.WaitForSync(ctx) }
func (s *scPub) stop()                              { s.p.Stop() }

// --- upstream ---

// watchedQueue tells when the upstream controller finished a sync.
type watchedQueue struct {
	workqueue.TypedRateLimitingInterface[string]
	mu       sync.Mutex
	inflight int
	done     int64
	changed  chan struct{}
}

func (q *watchedQueue) Get() (string, bool) {
	item, shutdown := q.TypedRateLimitingInterface.Get()
	q.mu.Lock()
	q.inflight++
	q.mu.Unlock()
	return item, shutdown
}

func (q *watchedQueue) Done(item string) {
	q.TypedRateLimitingInterface.Done(item)
	q.mu.Lock()
	q.inflight--
	q.done++
	close(q.changed)
	q.changed = make(chan struct{})
	q.mu.Unlock()
}

type upPub struct {
	c         kubernetes.Interface
	driver    string
	syncDelay *time.Duration
	ctrl      *resourceslice.Controller
	q         *watchedQueue
	doneAtUpd int64
}

func upResources(slices [][]resourceapi.Device) *resourceslice.DriverResources {
	pool := resourceslice.Pool{}
	for _, s := range slices {
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: s})
	}
	return &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{poolName: pool}}
}

func (u *upPub) start(ctx context.Context, node string, uid types.UID, slices [][]resourceapi.Device) error {
	u.q = &watchedQueue{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		changed:                    make(chan struct{}),
	}
	u.q.mu.Lock()
	u.doneAtUpd = u.q.done
	u.q.mu.Unlock()
	ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{
		DriverName: u.driver,
		KubeClient: u.c,
		Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: node, UID: uid},
		Resources:  upResources(slices),
		Queue:      u.q,
		SyncDelay:  u.syncDelay,
	})
	if err != nil {
		return err
	}
	u.ctrl = ctrl
	return u.waitIdle(ctx)
}

func (u *upPub) update(slices [][]resourceapi.Device) {
	u.q.mu.Lock()
	u.doneAtUpd = u.q.done
	u.q.mu.Unlock()
	u.ctrl.Update(upResources(slices))
}

func (u *upPub) waitIdle(ctx context.Context) error {
	for {
		u.q.mu.Lock()
		idle := u.q.done > u.doneAtUpd && u.q.inflight == 0 && u.q.Len() == 0
		ch := u.q.changed
		u.q.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-ch:
		case <-time.After(5 * time.Millisecond): // Len changes without a Done
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (u *upPub) stop() { u.ctrl.Stop() }

// --- observing what is stored, from outside ---

type storedSlice struct {
	obj     *resourceapi.ResourceSlice
	devices map[string]string // device name -> protobuf encoding
}

// observer watches every slice of one driver and says when a node's pool
// matches what is expected.
type observer struct {
	mu      sync.Mutex
	slices  map[string]*storedSlice // by name
	byNode  map[string]map[string]*storedSlice
	last    time.Time // when the latest event arrived
	changed chan struct{}
}

func newObserver(ctx context.Context, c kubernetes.Interface, driver string) (*observer, error) {
	o := &observer{slices: map[string]*storedSlice{}, byNode: map[string]map[string]*storedSlice{}, changed: make(chan struct{})}
	sel := fields.Set{resourceapi.ResourceSliceSelectorDriver: driver}.String()
	w, err := o.relist(ctx, c, sel)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			o.consume(w)
			// The server ends watches (a timeout, a slow watcher): list
			// again and go on from there.
			for {
				if ctx.Err() != nil {
					return
				}
				if w, err = o.relist(ctx, c, sel); err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	return o, nil
}

func (o *observer) relist(ctx context.Context, c kubernetes.Interface, sel string) (watch.Interface, error) {
	list, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	o.slices = map[string]*storedSlice{}
	o.byNode = map[string]map[string]*storedSlice{}
	for i := range list.Items {
		o.putLocked(&list.Items[i])
	}
	o.last = time.Now()
	close(o.changed)
	o.changed = make(chan struct{})
	o.mu.Unlock()
	return c.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
}

// stampedEvent is a watch event with the time it came off the watch.
type stampedEvent struct {
	ev watch.Event
	at time.Time
}

// consume applies the watch's events. One goroutine only takes events off
// the watch and stamps them, another applies them (encoding every device
// for the comparison): when the process is busy, applying lags, and the
// stamp, not the moment of applying, is when the event arrived. Without the
// split, the observer's own lag was added to every convergence time, the
// same for every implementation.
func (o *observer) consume(w watch.Interface) {
	var mu sync.Mutex
	var queue []stampedEvent
	more := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			at := time.Now()
			mu.Lock()
			queue = append(queue, stampedEvent{ev, at})
			mu.Unlock()
			select {
			case more <- struct{}{}:
			default:
			}
		}
	}()
	for {
		select {
		case <-more:
		case <-done:
		}
		mu.Lock()
		batch := queue
		queue = nil
		mu.Unlock()
		for _, se := range batch {
			o.apply(se)
		}
		select {
		case <-done:
			mu.Lock()
			rest := queue
			mu.Unlock()
			for _, se := range rest {
				o.apply(se)
			}
			return
		default:
		}
	}
}

func (o *observer) apply(se stampedEvent) {
	s, ok := se.ev.Object.(*resourceapi.ResourceSlice)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if se.ev.Type == watch.Deleted {
		o.removeLocked(s.Name)
	} else {
		o.putLocked(s)
	}
	if se.at.After(o.last) {
		o.last = se.at
	}
	close(o.changed)
	o.changed = make(chan struct{})
}

func (o *observer) put(s *resourceapi.ResourceSlice) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.putLocked(s)
}

func (o *observer) putLocked(s *resourceapi.ResourceSlice) {
	ss := &storedSlice{obj: s, devices: make(map[string]string, len(s.Spec.Devices))}
	for i := range s.Spec.Devices {
		b, _ := s.Spec.Devices[i].Marshal()
		ss.devices[s.Spec.Devices[i].Name] = string(b)
	}
	o.removeLocked(s.Name)
	o.slices[s.Name] = ss
	node := nodeOf(s)
	if o.byNode[node] == nil {
		o.byNode[node] = map[string]*storedSlice{}
	}
	o.byNode[node][s.Name] = ss
}

func nodeOf(s *resourceapi.ResourceSlice) string {
	if s.Spec.NodeName == nil {
		return ""
	}
	return *s.Spec.NodeName
}

func (o *observer) removeLocked(name string) {
	if old := o.slices[name]; old != nil {
		delete(o.byNode[nodeOf(old.obj)], name)
		delete(o.slices, name)
	}
}

type expectation struct {
	node    string
	devices map[string]string
	// notUIDs: slices with these UIDs do not count (the wiped ones).
	notUIDs map[string]bool
}

func expect(node string, slices [][]resourceapi.Device) *expectation {
	e := &expectation{node: node, devices: map[string]string{}}
	for _, s := range slices {
		for i := range s {
			b, _ := s[i].Marshal()
			e.devices[s[i].Name] = string(b)
		}
	}
	return e
}

func (o *observer) matchesLocked(e *expectation) bool {
	var gen, count int64 = -1, 0
	n := 0
	seen := 0
	for _, s := range o.byNode[e.node] {
		if e.notUIDs[string(s.obj.UID)] {
			return false
		}
		n++
		if gen >= 0 && (s.obj.Spec.Pool.Generation != gen || s.obj.Spec.Pool.ResourceSliceCount != count) {
			return false
		}
		gen, count = s.obj.Spec.Pool.Generation, s.obj.Spec.Pool.ResourceSliceCount
		for name, b := range s.devices {
			if e.devices[name] != b {
				return false
			}
			seen++
		}
	}
	return n > 0 && int64(n) == count && seen == len(e.devices)
}

// waitMatch returns when all expectations hold, with the arrival time of the
// event that completed them (or now, if they held already).
func (o *observer) waitMatch(ctx context.Context, es ...*expectation) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		o.mu.Lock()
		ok := true
		for _, e := range es {
			if !o.matchesLocked(e) {
				ok = false
				break
			}
		}
		at, ch := o.last, o.changed
		o.mu.Unlock()
		if ok {
			if at.IsZero() {
				at = time.Now()
			}
			return at, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			o.mu.Lock()
			defer o.mu.Unlock()
			for _, e := range es {
				if !o.matchesLocked(e) {
					n := 0
					for _, s := range o.slices {
						if s.obj.Spec.NodeName != nil && *s.obj.Spec.NodeName == e.node {
							n++
						}
					}
					return time.Time{}, fmt.Errorf("stored slices of node %s never matched (%d slices seen): %w", e.node, n, ctx.Err())
				}
			}
			return time.Time{}, fmt.Errorf("stored slices never matched: %w", ctx.Err())
		}
	}
}

func (o *observer) uids(node string) map[string]bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]bool{}
	for _, s := range o.slices {
		if s.obj.Spec.NodeName != nil && *s.obj.Spec.NodeName == node {
			out[string(s.obj.UID)] = true
		}
	}
	return out
}

// --- devices and scenarios ---

func device(name, model string) resourceapi.Device {
	return resourceapi.Device{
		Name: name,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"model":                  {StringValue: &model},
			"bench.example.com/numa": {IntValue: ptr(int64(len(name) % 2))},
			"bench.example.com/pcie": {VersionValue: ptr("5.0.0")},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory": {Value: resource.MustParse("80Gi")},
		},
	}
}

func ptr[T any](v T) *T { return &v }

func initialSlices(prefix string, nSlices, perSlice int) [][]resourceapi.Device {
	out := make([][]resourceapi.Device, nSlices)
	k := 0
	for i := range out {
		for range perSlice {
			out[i] = append(out[i], device(prefix+strconv.Itoa(k), "a100"))
			k++
		}
	}
	return out
}

func clone(s [][]resourceapi.Device) [][]resourceapi.Device {
	out := make([][]resourceapi.Device, len(s))
	for i := range s {
		out[i] = make([]resourceapi.Device, len(s[i]))
		for j := range s[i] {
			s[i][j].DeepCopyInto(&out[i][j])
		}
	}
	return out
}

type result struct {
	scenario string
	impl     string
	writes   map[string]int64
	reads    map[string]int64
	d        time.Duration
	note     string
}

func diff(a, b map[string]int64) (writes, reads map[string]int64) {
	writes, reads = map[string]int64{}, map[string]int64{}
	for k, v := range b {
		d := v - a[k]
		if d == 0 {
			continue
		}
		switch k {
		case "create", "update", "delete", "patch", "deletecollection":
			writes[k] = d
		default:
			reads[k] = d
		}
	}
	return writes, reads
}

func run(rounds, nNodes, slowWipeRounds int, only string, manyOnly bool) error {
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		return err
	}
	defer env.Stop()
	adminCfg := rest.CopyConfig(cfg)
	adminCfg.QPS, adminCfg.Burst = -1, -1
	admin, err := kubernetes.NewForConfig(adminCfg)
	if err != nil {
		return err
	}
	ctx := context.Background()

	zero := time.Duration(0)
	impls := []impl{
		{name: "sliceclient", driver: "sc.bench.example.com"},
		{name: "upstream", driver: "up.bench.example.com"},
		{name: "upstream(SyncDelay=0)", driver: "up0.bench.example.com"},
	}
	// Not part of the default set: sliceclient's many-nodes publishers on a
	// Watcher with MaxWritesInFlight.
	const bounded = "sliceclient(bounded writes)"
	if only != "" {
		impls = append(impls, impl{name: bounded, driver: "scb.bench.example.com"})
		var kept []impl
		for _, im := range impls {
			for _, name := range strings.Split(only, ",") {
				if im.name == name {
					kept = append(kept, im)
				}
			}
		}
		impls = kept
	}
	var results []result
	for r := 0; r < rounds; r++ {
		for _, im := range impls {
			// A driver name of its own per round: every round starts, like
			// the first, with no slices of its driver on the server. With
			// one name for all rounds, a publisher watching the driver on
			// all nodes (sliceclient's shared Watcher) would list every
			// earlier round's leftover slices at its start — 100 more
			// 64-device slices per round — which no real first start has;
			// publishers watching one node's slices never see them.
			im.driver = roundDriver(im.driver, r)
			client, cnt, err := countingClient(cfg)
			if err != nil {
				return err
			}
			newPub := func() publisher {
				switch im.name {
				case "sliceclient":
					return &scPub{c: client, driver: im.driver}
				case bounded:
					return &scPub{c: client, driver: im.driver, maxWrites: benchFlags.writesInFlight}
				case "upstream":
					return &upPub{c: client, driver: im.driver}
				default:
					return &upPub{c: client, driver: im.driver, syncDelay: &zero}
				}
			}
			obsCtx, stopObserver := context.WithCancel(ctx)
			defer stopObserver() // the ones of earlier rounds are stopped below already
			obs, err := newObserver(obsCtx, admin, im.driver)
			if err != nil {
				return err
			}
			node := fmt.Sprintf("bench-%d-%s", r, strings.Split(im.driver, ".")[0])
			nodeObj, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if !manyOnly {
				rs, err := scenarios(ctx, im, newPub, cnt, obs, admin, node, uidFor(nodeObj), r < slowWipeRounds)
				if err != nil {
					return fmt.Errorf("%s round %d: %w", im.name, r, err)
				}
				results = append(results, rs...)
			}
			mn, err := manyNodes(ctx, im, newPub, cnt, obs, admin, r, nNodes)
			if err != nil {
				return fmt.Errorf("%s many nodes round %d: %w", im.name, r, err)
			}
			results = append(results, mn...)
			stopObserver()
			fmt.Fprintf(os.Stderr, "round %d %s done\n", r, im.name)
		}
	}
	printTable(results)
	return nil
}

// roundDriver is driver with the round in its first label:
// "sc.bench.example.com", 2 -> "sc-r2.bench.example.com".
func roundDriver(driver string, round int) string {
	return strings.Replace(driver, ".", "-r"+strconv.Itoa(round)+".", 1)
}

func measure(cnt *counts, f func() (time.Time, time.Time, error)) (time.Duration, map[string]int64, map[string]int64, error) {
	before := cnt.snapshot()
	t0, t1, err := f()
	w, r := diff(before, cnt.snapshot())
	return t1.Sub(t0), w, r, err
}

func scenarios(ctx context.Context, im impl, newPub func() publisher, cnt *counts, obs *observer, admin kubernetes.Interface, node string, uid types.UID, slowWipe bool) ([]result, error) {
	var out []result
	add := func(name string, d time.Duration, w, r map[string]int64, note string) {
		out = append(out, result{scenario: name, impl: im.name, writes: w, reads: r, d: d, note: note})
	}
	state := initialSlices("dev-", 8, 125)
	pub := newPub()

	// Initial publish: from the start call until the slices are stored.
	d, w, r, err := measure(cnt, func() (time.Time, time.Time, error) {
		t0 := time.Now()
		if err := pub.start(ctx, node, uid, state); err != nil {
			return t0, t0, err
		}
		t1, err := obs.waitMatch(ctx, expect(node, state))
		return t0, t1, err
	})
	if err != nil {
		return nil, fmt.Errorf("initial: %w", err)
	}
	add("initial 1000 devices / 8 slices", d, w, r, "")

	// Restart with nothing changed: until started and its first sync is done.
	pub.stop()
	pub = newPub()
	d, w, r, err = measure(cnt, func() (time.Time, time.Time, error) {
		t0 := time.Now()
		if err := pub.start(ctx, node, uid, state); err != nil {
			return t0, t0, err
		}
		if err := pub.waitIdle(ctx); err != nil {
			return t0, t0, err
		}
		_, err := obs.waitMatch(ctx, expect(node, state))
		return t0, time.Now(), err
	})
	if err != nil {
		return nil, fmt.Errorf("restart: %w", err)
	}
	add("restart, no change", d, w, r, "")

	change := func(name string, f func(s [][]resourceapi.Device) [][]resourceapi.Device) error {
		next := f(clone(state))
		d, w, r, err := measure(cnt, func() (time.Time, time.Time, error) {
			t0 := time.Now()
			pub.update(next)
			t1, err := obs.waitMatch(ctx, expect(node, next))
			if err == nil {
				err = pub.waitIdle(ctx)
			}
			return t0, t1, err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		add(name, d, w, r, "")
		state = next
		return nil
	}
	steps := []struct {
		name string
		f    func(s [][]resourceapi.Device) [][]resourceapi.Device
	}{
		{"one attribute changed", func(s [][]resourceapi.Device) [][]resourceapi.Device {
			s[2][10] = device(s[2][10].Name, "h100")
			return s
		}},
		{"one device added (slice has room)", func(s [][]resourceapi.Device) [][]resourceapi.Device {
			s[3] = append(s[3], device("extra-0", "a100"))
			return s
		}},
		{"one device removed", func(s [][]resourceapi.Device) [][]resourceapi.Device {
			s[4] = s[4][1:]
			return s
		}},
		{"one attribute in each of two slices", func(s [][]resourceapi.Device) [][]resourceapi.Device {
			s[0][5] = device(s[0][5].Name, "h200")
			s[7][5] = device(s[7][5].Name, "h200")
			return s
		}},
		{"pool grows by one slice", func(s [][]resourceapi.Device) [][]resourceapi.Device {
			return append(s, initialSlices("grow-", 1, 125)...)
		}},
		{"pool shrinks by one slice", func(s [][]resourceapi.Device) [][]resourceapi.Device {
			return s[:len(s)-1]
		}},
	}
	for _, st := range steps {
		if err := change(st.name, st.f); err != nil {
			return nil, err
		}
	}

	// The kubelet's wipe: all of the node's slices deleted at once.
	if slowWipe || im.name != "upstream" {
		old := obs.uids(node)
		d, w, r, err = measure(cnt, func() (time.Time, time.Time, error) {
			t0 := time.Now()
			err := admin.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{
				FieldSelector: fields.Set{resourceapi.ResourceSliceSelectorNodeName: node}.String(),
			})
			if err != nil {
				return t0, t0, err
			}
			e := expect(node, state)
			e.notUIDs = old
			t1, err := obs.waitMatch(ctx, e)
			return t0, t1, err
		})
		if err != nil {
			return nil, fmt.Errorf("wipe: %w", err)
		}
		add("all slices deleted by someone else", d, w, r, "")
	}

	// CPU of a sync with nothing to write: same inventory again, many times.
	const iterations = 20
	copies := make([][][]resourceapi.Device, iterations)
	for i := range copies {
		copies[i] = clone(state) // the caller's copies are not the publisher's cost
	}
	// Start from a collected heap, so garbage of earlier scenarios does not
	// bill this one.
	runtime.GC()
	before := cnt.snapshot()
	cpu0 := cpuTime()
	for i := range iterations {
		pub.update(copies[i])
		if err := pub.waitIdle(ctx); err != nil {
			return nil, fmt.Errorf("no-op sync: %w", err)
		}
	}
	cpu := (cpuTime() - cpu0) / iterations
	w, r = diff(before, cnt.snapshot())
	add("no-op sync, CPU per sync", cpu, w, r, "process CPU time")
	pub.stop()
	return out, nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func manyNodes(ctx context.Context, im impl, newPub func() publisher, cnt *counts, obs *observer, admin kubernetes.Interface, round, n int) ([]result, error) {
	nodes := make([]string, n)
	es := make([]*expectation, n)
	uids := make([]types.UID, n)
	state := initialSlices("d-", 1, 64)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("many-%d-%s-%d", round, strings.Split(im.driver, ".")[0], i)
		nodeObj, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodes[i]}}, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		uids[i] = uidFor(nodeObj)
		es[i] = expect(nodes[i], state)
	}
	pubs := make([]publisher, n)
	var watcher *sliceclient.Watcher
	defer func() {
		if watcher != nil {
			watcher.Stop() // after the publishers, stopped below
		}
	}()
	var failed atomic.Value
	d, w, r, err := measure(cnt, func() (time.Time, time.Time, error) {
		if benchFlags.apiserverProfile != "" {
			profiled := profileAPIServer(ctx, admin, fmt.Sprintf("%s.%s.%d", benchFlags.apiserverProfile, im.name, round), 3)
			defer func() { <-profiled }()
			time.Sleep(50 * time.Millisecond) // let the profile begin
		}
		// The shared watch is created inside the timing: its list and watch
		// are part of what the publishers' start costs.
		t0 := time.Now()
		tracing.Store(benchFlags.trace)
		var wg sync.WaitGroup
		for i := range pubs {
			pubs[i] = newPub()
			if sc, ok := pubs[i].(*scPub); ok && (benchFlags.sharedWatch || sc.maxWrites > 0) {
				if watcher == nil {
					var err error
					if watcher, err = sliceclient.NewWatcher(sliceClient(sc.c), sc.driver, sliceclient.MaxWritesInFlight(sc.maxWrites)); err != nil {
						return t0, t0, err
					}
				}
				sc.watcher = watcher
			}
			wg.Go(func() {
				if err := pubs[i].start(ctx, nodes[i], uids[i], state); err != nil {
					failed.Store(err)
				}
			})
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			return t0, t0, err
		}
		t1, err := obs.waitMatch(ctx, es...)
		if benchFlags.trace {
			tracing.Store(false)
			printTrace(im.name, t0, t1)
		}
		return t0, t1, err
	})
	if err != nil {
		return nil, err
	}
	out := []result{{scenario: fmt.Sprintf("%d nodes x 64 devices, start", n), impl: im.name, writes: w, reads: r, d: d}}
	// Steady state: a while with nothing changing.
	before := cnt.snapshot()
	time.Sleep(3 * time.Second)
	w, r = diff(before, cnt.snapshot())
	out = append(out, result{scenario: fmt.Sprintf("%d nodes, steady 3 s", n), impl: im.name, writes: w, reads: r, note: "no timing"})
	for _, p := range pubs {
		p.stop()
	}
	return out, nil
}

func fmtCounts(m map[string]int64) string {
	if len(m) == 0 {
		return "0"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func printTable(results []result) {
	type key struct{ scenario, impl string }
	var order []key
	groups := map[key][]result{}
	for _, r := range results {
		k := key{r.scenario, r.impl}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	seenScenario := map[string]bool{}
	var scenariosOrdered []string
	for _, k := range order {
		if !seenScenario[k.scenario] {
			seenScenario[k.scenario] = true
			scenariosOrdered = append(scenariosOrdered, k.scenario)
		}
	}
	fmt.Println("| scenario | implementation | writes (last round) | reads (last round) | time, median | time, all rounds |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, sc := range scenariosOrdered {
		for _, k := range order {
			if k.scenario != sc {
				continue
			}
			rs := groups[k]
			ds := make([]time.Duration, len(rs))
			var all []string
			for i, r := range rs {
				ds[i] = r.d
				all = append(all, fmtDur(r.d))
			}
			sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
			last := rs[len(rs)-1]
			med := fmtDur(ds[len(ds)/2])
			if last.note == "no timing" {
				med, all = "-", nil
			}
			fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", sc, k.impl, fmtCounts(last.writes), fmtCounts(last.reads), med, strings.Join(all, " "))
		}
	}
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	}
}

// sliceClient is the part of c that sliceclient uses.
func sliceClient(c kubernetes.Interface) sliceclient.Client {
	return sliceclient.Client{ResourceSlices: c.ResourceV1().ResourceSlices(), Nodes: c.CoreV1().Nodes()}
}
