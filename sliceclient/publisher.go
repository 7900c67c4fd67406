package sliceclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dranode/dranode/inventory"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// DefaultDebounce is the shortest time between the starts of two syncs of a
// pool: a change after a quiet period is synced at once, further inventory
// updates and watch events within the window are coalesced into one sync at
// its end, so a burst costs at most two syncs.
const DefaultDebounce = 10 * time.Millisecond

// Options configure a Publisher.
type Options struct {
	// Client talks to the API server. Required.
	Client Client
	// DriverName is the DRA driver (a DNS subdomain of at most 63
	// characters). Required.
	DriverName string
	// NodeName is the node the devices are on; slices get it as
	// spec.nodeName and the Node as controller owner. Required.
	NodeName string
	// NodeUID is the Node's UID for the owner reference. When empty, Start
	// reads the Node once.
	NodeUID types.UID
	// Debounce is the coalescing window for inventory updates and watch
	// events (see DefaultDebounce); zero means DefaultDebounce, a negative
	// value no window.
	Debounce time.Duration
	// RateLimiter paces retries of a pool whose sync failed. Nil means the
	// client-go default for controllers (exponential per pool from 5 ms to
	// 1000 s, and an overall token bucket).
	RateLimiter workqueue.TypedRateLimiter[string]
	// OnError is called for every failed sync (the pool is retried with
	// backoff) and, once per slice content, with a *DroppedFieldsError. It
	// must not block. Nil discards errors; Stats still counts them.
	OnError func(error)
	// Watcher, when set, is a watch of DriverName's slices on all nodes
	// shared with other publishers of this process, instead of one watch
	// per publisher (see Watcher). It must be for the same driver.
	Watcher *Watcher
}

// Stats are the publisher's counters since it was created.
type Stats struct {
	Creates, Updates, Deletes int64
	// Errors counts failed syncs.
	Errors int64
	// Syncs counts completed pool syncs, including those with nothing to write.
	Syncs int64
}

// DroppedFieldsError reports that the API server stored a slice without some
// of the fields sent, usually because a feature gate is off. The publisher
// takes the stored form as current for that content and does not write it
// again.
type DroppedFieldsError struct {
	SliceName   string
	Sent, Saved *resourceapi.ResourceSlice
}

func (e *DroppedFieldsError) Error() string {
	return fmt.Sprintf("ResourceSlice %s: the API server stored it without some fields that were sent (is a DRA feature gate disabled?)", e.SliceName)
}

// TaintsDropped reports whether the server stored a device that was sent
// with taints without any: the API server keeps no device taints
// (DRADeviceTaints off, the default of Kubernetes 1.34 and 1.35), so a
// taint does not keep the scheduler from allocating the device.
func (e *DroppedFieldsError) TaintsDropped() bool {
	return e.deviceFieldDropped(func(d *resourceapi.Device) int { return len(d.Taints) })
}

// CountersDropped reports whether the server stored the slice without the
// shared counters sent, or a device without the counters it consumes: it
// takes no partitionable devices (DRAPartitionableDevices off, the default
// of Kubernetes 1.34 and 1.35), so the devices sharing a counter set look
// independent to the scheduler (inventory.WithoutSharedCounters).
func (e *DroppedFieldsError) CountersDropped() bool {
	if e.Sent != nil && e.Saved != nil && len(e.Sent.Spec.SharedCounters) > 0 && len(e.Saved.Spec.SharedCounters) == 0 {
		return true
	}
	return e.deviceFieldDropped(func(d *resourceapi.Device) int { return len(d.ConsumesCounters) })
}

// deviceFieldDropped reports whether a device sent with a field (a non-zero
// count of it) was stored without any.
func (e *DroppedFieldsError) deviceFieldDropped(count func(*resourceapi.Device) int) bool {
	if e.Sent == nil || e.Saved == nil {
		return false
	}
	saved := make(map[string]int, len(e.Saved.Spec.Devices))
	for i := range e.Saved.Spec.Devices {
		saved[e.Saved.Spec.Devices[i].Name] = count(&e.Saved.Spec.Devices[i])
	}
	for i := range e.Sent.Spec.Devices {
		d := &e.Sent.Spec.Devices[i]
		if n, ok := saved[d.Name]; ok && count(d) > 0 && n == 0 {
			return true
		}
	}
	return false
}

// Publisher keeps one node's ResourceSlices of one driver equal to the
// driver's inventory. Create it with New, give it the inventory with
// Update (before or after Start), and Stop it when done. Until the first
// successful Update it writes nothing, so a publisher that starts before
// its driver knows the devices does not delete the slices published before.
type Publisher struct {
	opts     Options
	debounce time.Duration
	planner  planner
	queue    workqueue.TypedRateLimitingInterface[string]

	updateMu  sync.Mutex // serializes Update
	mu        sync.Mutex
	inventory map[string]*desiredPool // by pool name
	haveInv   bool                    // Update succeeded at least once
	stored    map[string]*storedSlice // by slice name
	accepted  map[string]acceptance   // by slice name
	want      map[string]uint64       // per pool: bumped on every enqueue
	lastStart map[string]time.Time    // per pool: when its last sync started
	done      map[string]uint64       // per pool: want as of the last successful sync
	changed   chan struct{}           // closed and replaced when done changes
	// Writes in flight by slice name, the watch events about those slices
	// that arrived meanwhile, and what the finished writes' own events look
	// like: an event may beat the response to the write that caused it, and
	// must then not count as someone else's change (see observe, writeDone).
	writing  map[string]int
	deferred map[string][]sliceEvent
	echoes   map[string][]sliceEvent

	creates, updates, deletes, errs, syncs atomic.Int64

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New checks opts and returns a publisher that does nothing until Start.
func New(opts Options) (*Publisher, error) {
	if opts.Client.ResourceSlices == nil {
		return nil, fmt.Errorf("%w: Client.ResourceSlices is nil", ErrInvalidOptions)
	}
	if opts.Client.Nodes == nil && opts.NodeUID == "" {
		return nil, fmt.Errorf("%w: Client.Nodes is nil and NodeUID is empty: one is needed for the slices' owner", ErrInvalidOptions)
	}
	if err := checkDriverName(opts.DriverName); err != nil {
		return nil, err
	}
	if err := checkNodeName(opts.NodeName); err != nil {
		return nil, err
	}
	if opts.Watcher != nil && opts.Watcher.driver != opts.DriverName {
		return nil, fmt.Errorf("%w: Watcher is for driver %q, DriverName is %q", ErrInvalidOptions, opts.Watcher.driver, opts.DriverName)
	}
	debounce := opts.Debounce
	switch {
	case debounce == 0:
		debounce = DefaultDebounce
	case debounce < 0:
		debounce = 0
	}
	limiter := opts.RateLimiter
	if limiter == nil {
		limiter = workqueue.DefaultTypedControllerRateLimiter[string]()
	}
	return &Publisher{
		opts:     opts,
		debounce: debounce,
		planner:  planner{driver: opts.DriverName, node: opts.NodeName},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter,
			workqueue.TypedRateLimitingQueueConfig[string]{DelayingQueue: newDelayQueue("sliceclient-" + opts.DriverName)}),
		inventory: map[string]*desiredPool{},
		stored:    map[string]*storedSlice{},
		accepted:  map[string]acceptance{},
		want:      map[string]uint64{},
		lastStart: map[string]time.Time{},
		done:      map[string]uint64{},
		changed:   make(chan struct{}),
		writing:   map[string]int{},
		deferred:  map[string][]sliceEvent{},
		echoes:    map[string][]sliceEvent{},
	}, nil
}

// Update replaces the inventory. An invalid inventory is rejected as a whole
// with inventory.Validate's *inventory.ValidationError (errors.Is
// inventory.ErrInvalid) and the previous one stays published. Update copies inv and returns at once; the writes
// happen in the background after the debounce window.
func (p *Publisher) Update(inv inventory.Inventory) error {
	touched, err := p.prepare(inv)
	if err != nil {
		return err
	}
	for _, name := range touched {
		p.enqueue(name)
	}
	return nil
}

// prepare validates and encodes inv, makes it the inventory and returns the
// pools to sync.
func (p *Publisher) prepare(inv inventory.Inventory) ([]string, error) {
	p.updateMu.Lock()
	defer p.updateMu.Unlock()
	p.mu.Lock()
	prev := p.inventory
	p.mu.Unlock()

	// Encoding is the copy the publisher keeps; a device whose encoding is
	// the same as in the previous inventory was validated then.
	encoded := make([][]desiredDevice, len(inv.Pools))
	var scratch []byte
	for i := range inv.Pools {
		devices := inv.Pools[i].Devices
		old := prev[inv.Pools[i].Name]
		encoded[i] = make([]desiredDevice, len(devices))
		for j := range devices {
			var before *desiredDevice
			if old != nil {
				if k, ok := old.byName[devices[j].Name]; ok {
					before = &old.devices[k]
				}
			}
			encoded[i][j] = encodeDeviceAgain(&devices[j], before, &scratch)
		}
	}
	unchanged := func(pool, device int) bool {
		old := prev[inv.Pools[pool].Name]
		if old == nil {
			return false
		}
		k, ok := old.byName[inv.Pools[pool].Devices[device].Name]
		return ok && bytes.Equal(old.devices[k].full, encoded[pool][device].full)
	}
	if err := inventory.ValidateIncremental(inv, unchanged); err != nil {
		return nil, err
	}
	pools := make(map[string]*desiredPool, len(inv.Pools))
	for i, pool := range inv.Pools {
		pools[pool.Name] = newDesiredPoolEncoded(pool, encoded[i])
	}
	p.mu.Lock()
	old := p.inventory
	p.inventory = pools
	var touched []string
	if !p.haveInv {
		// Until now nothing was synced; pools only the server has are
		// removed now that the inventory is known.
		p.haveInv = true
		seen := map[string]bool{}
		for _, s := range p.stored {
			if name := s.obj.Spec.Pool.Name; !seen[name] && pools[name] == nil {
				seen[name] = true
				touched = append(touched, name)
			}
		}
	}
	for name := range old {
		touched = append(touched, name)
	}
	for name := range pools {
		if _, ok := old[name]; !ok {
			touched = append(touched, name)
		}
	}
	p.mu.Unlock()
	return touched, nil
}

// enqueue schedules a sync of pool. The first change after a quiet period
// is synced at once; changes within Debounce of the start of the previous
// sync wait for the end of that window and are coalesced into one sync
// there (the workqueue keeps one entry per pool).
func (p *Publisher) enqueue(pool string) {
	p.mu.Lock()
	p.want[pool]++
	var delay time.Duration
	if last, ok := p.lastStart[pool]; ok {
		delay = p.debounce - time.Since(last)
	}
	p.mu.Unlock()
	if delay > 0 {
		p.queue.AddAfter(pool, delay)
	} else {
		p.queue.Add(pool)
	}
}

// Start reads the Node's UID if it was not given, starts watching the
// node's slices of the driver and, once the watch has its initial list,
// starts syncing in the background. It returns when that is running; use
// WaitForSync to wait for the slices to be published.
func (p *Publisher) Start(ctx context.Context) error {
	if p.cancel != nil {
		return errors.New("sliceclient: Start called twice")
	}
	uid := p.opts.NodeUID
	if uid == "" {
		node, err := p.opts.Client.Nodes.Get(ctx, p.opts.NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("sliceclient: reading Node %q for its UID: %w", p.opts.NodeName, err)
		}
		uid = node.UID
	}
	p.planner.owner = metav1.OwnerReference{
		APIVersion: "v1", Kind: "Node", Name: p.opts.NodeName, UID: uid, Controller: ptrTo(true),
	}
	ctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel

	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.observe(obj, false) },
		UpdateFunc: func(_, obj any) { p.observe(obj, false) },
		DeleteFunc: func(obj any) { p.observe(obj, true) },
	}
	var reg cache.ResourceEventHandlerRegistration
	var err error
	if w := p.opts.Watcher; w != nil {
		if err := w.run(); err != nil {
			cancel()
			return fmt.Errorf("sliceclient: watching ResourceSlices: %w", err)
		}
		// The shared watch carries every node's slices of the driver; this
		// node's share is handed to observe once the watch has its initial
		// list: first the node's slices known by then, then every event.
		select {
		case <-w.reg.HasSyncedChecker().Done():
		case <-ctx.Done():
			p.Stop()
			return fmt.Errorf("sliceclient: waiting for the initial list of ResourceSlices: %w", ctx.Err())
		}
		unsubscribe, err := w.subscribe(p.opts.NodeName, p.observe)
		if err != nil {
			p.Stop()
			return fmt.Errorf("sliceclient: watching ResourceSlices: %w", err)
		}
		reg = w.reg
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.queue.ShutDown()
			<-ctx.Done()
			unsubscribe()
		}()
	} else {
		selector := fields.Set{
			resourceapi.ResourceSliceSelectorNodeName: p.opts.NodeName,
			resourceapi.ResourceSliceSelectorDriver:   p.opts.DriverName,
		}.String()
		informer := newSliceInformer(p.opts.Client, selector, cache.Indexers{})
		reg, err = informer.AddEventHandler(handler)
		if err != nil {
			cancel()
			return fmt.Errorf("sliceclient: watching ResourceSlices: %w", err)
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.queue.ShutDown()
			informer.RunWithContext(ctx)
		}()
	}
	select {
	case <-reg.HasSyncedChecker().Done():
	case <-ctx.Done():
		p.Stop()
		return fmt.Errorf("sliceclient: waiting for the initial list of ResourceSlices: %w", ctx.Err())
	}
	// Pools that exist only on the server (left over from an earlier
	// inventory) were enqueued by observe; pools of the inventory too.
	p.mu.Lock()
	var pools []string
	for name := range p.inventory {
		pools = append(pools, name)
	}
	p.mu.Unlock()
	for _, name := range pools {
		p.enqueueNow(name)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for p.processNext(ctx) {
		}
	}()
	return nil
}

func (p *Publisher) enqueueNow(pool string) {
	p.mu.Lock()
	p.want[pool]++
	p.mu.Unlock()
	p.queue.Add(pool)
}

// Stop ends watching and syncing and waits for both. Slices stay as they are.
func (p *Publisher) Stop() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	p.queue.ShutDown()
	p.wg.Wait()
}

// Stats returns the counters.
func (p *Publisher) Stats() Stats {
	return Stats{
		Creates: p.creates.Load(), Updates: p.updates.Load(), Deletes: p.deletes.Load(),
		Errors: p.errs.Load(), Syncs: p.syncs.Load(),
	}
}

// WaitForSync blocks until every pool has been synced successfully since it
// last changed or an event about it arrived, or until ctx ends.
func (p *Publisher) WaitForSync(ctx context.Context) error {
	for {
		p.mu.Lock()
		idle := true
		for pool, w := range p.want {
			if p.done[pool] != w {
				idle = false
				break
			}
		}
		ch := p.changed
		p.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("sliceclient: waiting for sync: %w", ctx.Err())
		}
	}
}

func rvNewer(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil {
		return a != b
	}
	return x > y
}

// observe keeps the local view of the stored slices current and schedules a
// sync of the slice's pool unless the event is the echo of our own write.
func (p *Publisher) observe(obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	slice, ok := obj.(*resourceapi.ResourceSlice)
	if !ok {
		return
	}
	p.mu.Lock()
	if p.writing[slice.Name] > 0 {
		// Possibly the echo of a write whose response is still on its way:
		// writeDone decides once the writes are answered.
		p.deferred[slice.Name] = append(p.deferred[slice.Name], eventOf(slice, deleted))
	}
	cur := p.stored[slice.Name]
	echo := p.writing[slice.Name] > 0
	switch {
	case deleted:
		// Judged by UID, not resourceVersion: the object a deletion names
		// is gone for good, even when the event carries an older version
		// than ours (a relist's DeletedFinalStateUnknown holds the last
		// version the watch saw, not the one our write made). Without a
		// local copy we deleted it ourselves; with another UID we already
		// wrote it again. Either way there is nothing to repair.
		if cur != nil && cur.obj.UID == slice.UID {
			delete(p.stored, slice.Name)
		} else {
			echo = true
		}
	case cur != nil && cur.obj.ResourceVersion == slice.ResourceVersion:
		echo = true
		if cur.obj != slice {
			// Usually the echo of our own write: the write's answer is
			// dropped for the informer's copy of the same version.
			p.stored[slice.Name] = cur.on(slice)
		}
	case cur == nil || rvNewer(slice.ResourceVersion, cur.obj.ResourceVersion):
		p.stored[slice.Name] = newStoredSlice(slice)
	default:
		echo = true // older than what a write already told us
	}
	p.mu.Unlock()
	if !echo {
		p.enqueue(slice.Spec.Pool.Name)
	}
}

func (p *Publisher) processNext(ctx context.Context) bool {
	pool, shutdown := p.queue.Get()
	if shutdown {
		return false
	}
	defer p.queue.Done(pool)
	p.mu.Lock()
	want := p.want[pool]
	p.lastStart[pool] = time.Now()
	p.mu.Unlock()
	if err := p.syncPool(ctx, pool); err != nil {
		p.errs.Add(1)
		if p.opts.OnError != nil {
			p.opts.OnError(fmt.Errorf("sliceclient: syncing pool %q: %w", pool, err))
		}
		p.queue.AddRateLimited(pool)
		return true
	}
	p.syncs.Add(1)
	p.queue.Forget(pool)
	p.mu.Lock()
	if p.done[pool] < want {
		p.done[pool] = want
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	return true
}

func (p *Publisher) syncPool(ctx context.Context, pool string) error {
	p.mu.Lock()
	if !p.haveInv {
		// Without an inventory every slice would look unwanted: never
		// delete a node's slices just because Update was not called yet.
		p.mu.Unlock()
		return nil
	}
	plan := p.planner.plan(pool, p.inventory[pool], p.storedIn(pool), p.accepted)
	for _, obj := range plan.deletes {
		p.writing[obj.Name]++
	}
	for _, w := range plan.updates {
		p.writing[w.obj.Name]++
	}
	for _, w := range plan.creates {
		p.writing[w.obj.Name]++
	}
	p.mu.Unlock()
	if plan.empty() {
		return nil
	}
	api := p.opts.Client.ResourceSlices
	var errs []error
	var errMu sync.Mutex
	fail := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}
	// Writes of one step go out together; the order of the steps keeps a
	// reader from ever seeing two slices claim one device under one
	// generation for longer than necessary: old slices go first.
	parallel(len(plan.deletes), func(i int) {
		obj := plan.deletes[i]
		err := p.opts.Watcher.limitWrite(ctx, func() error {
			return api.Delete(ctx, obj.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &obj.UID}})
		})
		defer p.writeDone(pool, obj.Name, sliceEvent{deleted: true, uid: obj.UID}, err == nil || apierrors.IsNotFound(err))
		if err != nil && !apierrors.IsNotFound(err) {
			fail(fmt.Errorf("deleting ResourceSlice %s: %w", obj.Name, err))
			return
		}
		p.deletes.Add(1)
		p.mu.Lock()
		if cur := p.stored[obj.Name]; cur != nil && cur.obj.UID == obj.UID {
			delete(p.stored, obj.Name)
		}
		p.mu.Unlock()
	})
	parallel(len(plan.updates), func(i int) {
		w := plan.updates[i]
		var got *resourceapi.ResourceSlice
		err := p.opts.Watcher.limitWrite(ctx, func() (err error) {
			got, err = api.Update(ctx, w.obj, metav1.UpdateOptions{})
			return err
		})
		defer p.writeDone(pool, w.obj.Name, eventOf(got, false), err == nil)
		if err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				p.refresh(ctx, w.obj.Name)
			}
			fail(fmt.Errorf("updating ResourceSlice %s: %w", w.obj.Name, err))
			return
		}
		p.updates.Add(1)
		p.stored1(w, got)
	})
	parallel(len(plan.creates), func(i int) {
		w := plan.creates[i]
		var got *resourceapi.ResourceSlice
		err := p.opts.Watcher.limitWrite(ctx, func() (err error) {
			got, err = api.Create(ctx, w.obj, metav1.CreateOptions{})
			return err
		})
		defer p.writeDone(pool, w.obj.Name, eventOf(got, false), err == nil)
		if err != nil {
			if apierrors.IsAlreadyExists(err) {
				p.refresh(ctx, w.obj.Name)
			}
			fail(fmt.Errorf("creating ResourceSlice %s: %w", w.obj.Name, err))
			return
		}
		p.creates.Add(1)
		p.stored1(w, got)
	})
	return errors.Join(errs...)
}

// storedIn returns the stored slices of pool. Called with p.mu held.
func (p *Publisher) storedIn(pool string) []*storedSlice {
	var stored []*storedSlice
	for _, s := range p.stored {
		if s.obj.Spec.Pool.Name == pool {
			stored = append(stored, s)
		}
	}
	return stored
}

// sliceEvent is what matters of a watch event to tell an echo: a deletion
// by UID, anything else by resourceVersion.
type sliceEvent struct {
	deleted bool
	uid     types.UID
	rv      string
}

func eventOf(s *resourceapi.ResourceSlice, deleted bool) sliceEvent {
	if s == nil {
		return sliceEvent{}
	}
	if deleted {
		return sliceEvent{deleted: true, uid: s.UID}
	}
	return sliceEvent{rv: s.ResourceVersion}
}

// writeDone ends a write to slice name of pool (after its result is
// recorded: deferred calls run after the write's own bookkeeping). When the
// last write in flight to that slice is answered, the events that arrived
// meanwhile are checked: one that is not the echo of a successful write is
// someone else's change, and the pool is synced again.
func (p *Publisher) writeDone(pool, name string, echo sliceEvent, ok bool) {
	p.mu.Lock()
	if ok {
		p.echoes[name] = append(p.echoes[name], echo)
	}
	p.writing[name]--
	if p.writing[name] > 0 {
		p.mu.Unlock()
		return
	}
	foreign := false
	for _, ev := range p.deferred[name] {
		own := false
		for _, e := range p.echoes[name] {
			if e == ev {
				own = true
				break
			}
		}
		foreign = foreign || !own
	}
	delete(p.writing, name)
	delete(p.deferred, name)
	delete(p.echoes, name)
	p.mu.Unlock()
	if foreign {
		p.enqueue(pool)
	}
}

// stored1 records what the server returned for a write, and whether it kept
// everything that was sent.
func (p *Publisher) stored1(w plannedWrite, got *resourceapi.ResourceSlice) {
	got.ManagedFields = nil // as in the informer's cache (dropManagedFields)
	s := storedAfterWrite(got, &w)
	var dropped *DroppedFieldsError
	p.mu.Lock()
	switch cur := p.stored[got.Name]; {
	case p.deletedMeanwhile(got.Name, got.UID):
		// Deleted by someone else before the answer came (the kubelet's
		// start-up wipe): the object answered is gone, and recording it
		// would make the sync that writeDone schedules see nothing to do.
	case cur != nil && cur.obj.ResourceVersion == got.ResourceVersion:
		// The watch delivered this version before the answer came: keep
		// the informer's copy, with the canonical form computed here.
		p.stored[got.Name] = s.on(cur.obj)
	case cur == nil || !rvNewer(cur.obj.ResourceVersion, got.ResourceVersion):
		p.stored[got.Name] = s
	}
	if !s.canon().equal(&w.canon) {
		acc := acceptance{desiredSum: w.canon.sum(), storedSum: s.canon().sum()}
		if p.accepted[got.Name].desiredSum != acc.desiredSum {
			dropped = &DroppedFieldsError{SliceName: got.Name, Sent: w.obj, Saved: got}
		}
		p.accepted[got.Name] = acc
	}
	p.mu.Unlock()
	if dropped != nil && p.opts.OnError != nil {
		p.opts.OnError(dropped)
	}
}

// deletedMeanwhile reports whether a deletion of the object with uid
// arrived while a write to slice name was in flight. Called with p.mu held.
func (p *Publisher) deletedMeanwhile(name string, uid types.UID) bool {
	for _, ev := range p.deferred[name] {
		if ev.deleted && ev.uid == uid {
			return true
		}
	}
	return false
}

// refresh reads one slice after a conflict so that the retry starts from
// what the server has, not from a watch that may lag.
func (p *Publisher) refresh(ctx context.Context, name string) {
	got, err := p.opts.Client.ResourceSlices.Get(ctx, name, metav1.GetOptions{})
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case apierrors.IsNotFound(err):
		delete(p.stored, name)
	case err == nil:
		if got.Spec.NodeName != nil && *got.Spec.NodeName == p.opts.NodeName && got.Spec.Driver == p.opts.DriverName {
			p.stored[name] = newStoredSlice(got)
		}
	}
}

func parallel(n int, f func(int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Go(func() { f(i) })
	}
	wg.Wait()
}

func ptrTo[T any](v T) *T { return &v }
