package sliceclient

import (
	"context"
	"fmt"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Watcher is one watch of a driver's ResourceSlices on every node, for a
// process that runs Publishers for many nodes (a simulator, a controller
// publishing for a fleet). Without it each Publisher lists and watches its
// own node's slices; with it the API server serves one watch and the
// publishers get their node's events from it in-process.
//
// Give it to the publishers as Options.Watcher. It starts with the first
// publisher's Start and keeps running until Stop; call Stop after the
// publishers using it have stopped. The client needs list and watch on all
// ResourceSlices of the driver (a node's own credentials usually only see
// that node's, so a node agent should not use a Watcher).
type Watcher struct {
	driver   string
	informer cache.SharedIndexInformer
	// reg is the one handler on the informer; it hands each event to the
	// publishers of the slice's node. One handler instead of one per
	// publisher: the informer would otherwise deliver every event to every
	// publisher's handler (100 nodes: 100 hand-offs between goroutines per
	// event, 99 of them dropped by a filter).
	reg cache.ResourceEventHandlerRegistration

	mu      sync.Mutex
	cancel  context.CancelFunc // nil until started
	stopped bool
	done    chan struct{}

	// subsMu guards subs and is held while an event is handed over, so a
	// publisher subscribing gets its node's slices from the informer's
	// store and then every later event, none twice out of order.
	subsMu sync.Mutex
	subs   map[string][]*subscription // by node name

	// writeSlots bounds the publishers' writes in flight; nil: no bound.
	writeSlots chan struct{}
}

// subscription is one publisher's share of the watch.
type subscription struct {
	node    string
	observe func(obj any, deleted bool)
}

// nodeIndex indexes the Watcher's store by spec.nodeName.
const nodeIndex = "spec.nodeName"

// WatcherOption configures a Watcher.
type WatcherOption func(*Watcher) error

// MaxWritesInFlight bounds the writes (creates, updates, deletes) that the
// publishers sharing the Watcher have in flight together; 0, the default,
// means no bound. When many publishers start at once, their writes all
// reach the API server together; a few at a time let the server work on
// some while the publishers take in the answers to others.
func MaxWritesInFlight(n int) WatcherOption {
	return func(w *Watcher) error {
		if n < 0 {
			return fmt.Errorf("%w: MaxWritesInFlight(%d) is negative", ErrInvalidOptions, n)
		}
		if n > 0 {
			w.writeSlots = make(chan struct{}, n)
		}
		return nil
	}
}

// NewWatcher checks driverName and the options and returns a Watcher that
// does nothing until a publisher using it starts.
func NewWatcher(client Client, driverName string, opts ...WatcherOption) (*Watcher, error) {
	if client.ResourceSlices == nil {
		return nil, fmt.Errorf("%w: Watcher client has no ResourceSlices", ErrInvalidOptions)
	}
	if err := checkDriverName(driverName); err != nil {
		return nil, err
	}
	selector := fields.Set{resourceapi.ResourceSliceSelectorDriver: driverName}.String()
	w := &Watcher{
		driver: driverName,
		informer: newSliceInformer(client, selector, cache.Indexers{nodeIndex: func(obj any) ([]string, error) {
			if node := sliceNode(obj); node != "" {
				return []string{node}, nil
			}
			return nil, nil
		}}),
		done: make(chan struct{}),
		subs: map[string][]*subscription{},
	}
	reg, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { w.dispatch(sliceNode(obj), obj, false) },
		// spec.nodeName is immutable: an update concerns one node.
		UpdateFunc: func(_, obj any) { w.dispatch(sliceNode(obj), obj, false) },
		DeleteFunc: func(obj any) { w.dispatch(sliceNode(obj), obj, true) },
	})
	if err != nil {
		return nil, fmt.Errorf("sliceclient: watching ResourceSlices: %w", err)
	}
	w.reg = reg
	for _, opt := range opts {
		if err := opt(w); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// limitWrite runs write when the Watcher's bound allows (at once without
// one), or returns ctx's error if it ends first.
func (w *Watcher) limitWrite(ctx context.Context, write func() error) error {
	if w == nil || w.writeSlots == nil {
		return write()
	}
	select {
	case w.writeSlots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("waiting for a write slot: %w", ctx.Err())
	}
	defer func() { <-w.writeSlots }()
	return write()
}

// sliceNode is the spec.nodeName of a slice (or of a deletion's last
// known state), "" for anything else.
func sliceNode(obj any) string {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if s, ok := obj.(*resourceapi.ResourceSlice); ok && s.Spec.NodeName != nil {
		return *s.Spec.NodeName
	}
	return ""
}

func (w *Watcher) dispatch(node string, obj any, deleted bool) {
	if node == "" {
		return
	}
	w.subsMu.Lock()
	defer w.subsMu.Unlock()
	for _, sub := range w.subs[node] {
		sub.observe(obj, deleted)
	}
}

// subscribe gives observe the node's slices the informer has now and then
// every event about the node's slices, until the returned func is called.
// The informer must have synced. observe is called with the Watcher's lock
// held and must not call back into the Watcher.
func (w *Watcher) subscribe(node string, observe func(obj any, deleted bool)) (unsubscribe func(), err error) {
	sub := &subscription{node: node, observe: observe}
	w.subsMu.Lock()
	defer w.subsMu.Unlock()
	// Events already in the store but not yet dispatched reach observe
	// again after this; observe ignores what it has seen (same or older
	// resourceVersion, deletions of what it does not have).
	current, err := w.informer.GetIndexer().ByIndex(nodeIndex, node)
	if err != nil {
		return nil, err
	}
	for _, obj := range current {
		observe(obj, false)
	}
	w.subs[node] = append(w.subs[node], sub)
	return func() {
		w.subsMu.Lock()
		defer w.subsMu.Unlock()
		subs := w.subs[node]
		for i := range subs {
			if subs[i] == sub {
				w.subs[node] = append(subs[:i:i], subs[i+1:]...)
				break
			}
		}
		if len(w.subs[node]) == 0 {
			delete(w.subs, node)
		}
	}, nil
}

// newSliceInformer watches the ResourceSlices that selector picks.
func newSliceInformer(client Client, selector string, indexers cache.Indexers) cache.SharedIndexInformer {
	slices := client.ResourceSlices
	// Lists and watches after a failed one, or after a watch the server
	// ended early, wait a random part of ReconnectSpread (reconnect.go).
	spread := newReconnects()
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (list runtime.Object, err error) {
			o.FieldSelector = selector
			release, err := spread.call(ctx, 0, func(ctx context.Context) error {
				list, err = slices.List(ctx, o)
				return err
			})
			release()
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (w watch.Interface, err error) {
			o.FieldSelector = selector
			var timeout time.Duration
			if o.TimeoutSeconds != nil {
				timeout = time.Duration(*o.TimeoutSeconds) * time.Second
			}
			release, err := spread.call(ctx, timeout, func(ctx context.Context) error {
				w, err = slices.Watch(ctx, o)
				return err
			})
			if err != nil {
				if w != nil {
					w.Stop() // abandoned after it was answered
				}
				return nil, err
			}
			// The watch's request lives in the call's context: released
			// when the informer stops the watch (it always does).
			return releasingWatch{Interface: w, release: release}, nil
		},
	}, &resourceapi.ResourceSlice{}, 0, indexers)
	// Nothing here reads managedFields, and for a slice they list every
	// device's fields again: the cache (and the publisher's view, which
	// shares its objects) holds the slices without them. An update sent
	// without managedFields leaves the server's as they are.
	if err := informer.SetTransform(dropManagedFields); err != nil {
		panic(err) // only fails once started; this one was just made
	}
	return informer
}

// releasingWatch releases its request's context when stopped.
type releasingWatch struct {
	watch.Interface
	release func()
}

func (w releasingWatch) Stop() {
	w.Interface.Stop()
	w.release()
}

func dropManagedFields(obj any) (any, error) {
	if slice, ok := obj.(*resourceapi.ResourceSlice); ok {
		slice.ManagedFields = nil
	}
	return obj, nil
}

// run starts the informer once; later calls do nothing.
func (w *Watcher) run() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return fmt.Errorf("%w: the Watcher was stopped", ErrInvalidOptions)
	}
	if w.cancel != nil {
		return nil
	}
	// The watch outlives any one publisher's context: it is the Watcher's.
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() {
		defer close(w.done)
		w.informer.RunWithContext(ctx)
	}()
	return nil
}

// Stop ends the watch and waits for it. Publishers still using the Watcher
// get no more events; a publisher started after Stop fails to start.
func (w *Watcher) Stop() {
	w.mu.Lock()
	cancel := w.cancel
	w.stopped = true
	w.mu.Unlock()
	if cancel != nil {
		cancel()
		<-w.done
	}
}
