package sliceclient

import (
	"context"
	"fmt"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
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

	mu      sync.Mutex
	cancel  context.CancelFunc // nil until started
	stopped bool
	done    chan struct{}
}

// NewWatcher checks driverName and returns a Watcher that does nothing until
// a publisher using it starts.
func NewWatcher(client kubernetes.Interface, driverName string) (*Watcher, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: Watcher client is nil", ErrInvalidOptions)
	}
	if err := ValidateDriverName(driverName); err != nil {
		return nil, err
	}
	selector := fields.Set{resourceapi.ResourceSliceSelectorDriver: driverName}.String()
	return &Watcher{
		driver:   driverName,
		informer: newSliceInformer(client, selector),
		done:     make(chan struct{}),
	}, nil
}

// newSliceInformer watches the ResourceSlices that selector picks.
func newSliceInformer(client kubernetes.Interface, selector string) cache.SharedIndexInformer {
	slices := client.ResourceV1().ResourceSlices()
	return cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return slices.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return slices.Watch(ctx, o)
		},
	}, &resourceapi.ResourceSlice{}, 0, cache.Indexers{})
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
