package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	pluginwatcherapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// Kubelet is the node side of DRA as the kubelet runs it: the plugin
// manager watching the registration directory, and the DRA manager handling
// DRAPlugin registrations and preparing pods' claims. It is the upstream
// code, wired the way the kubelet's container manager wires it.
type Kubelet struct {
	DRA *dra.Manager

	registrations *registrations

	cancel context.CancelFunc
	stopCh chan struct{}
	done   sync.WaitGroup

	mu   sync.Mutex
	pods map[string]*corev1.Pod // active pods by UID, for the reconcile loop
}

// KubeletOptions say where the kubelet keeps things.
type KubeletOptions struct {
	Client      kubernetes.Interface
	NodeName    string
	RegistryDir string // the plugin manager watches it (plugins_registry)
	StateDir    string // the DRA manager's checkpoint directory
	Logger      klog.Logger
	// ActivePods are running on the node from the start: a restarted
	// kubelet knows its pods before the DRA manager's first reconcile,
	// which unprepares claims of pods it does not know.
	ActivePods []*corev1.Pod
	// HealthServices, when set, are the only versions of the device-health
	// service this kubelet knows: it registers plugins as if they announced
	// no other (their DRA services are kept). The kubelets of 1.34 to 1.36
	// know only v1alpha1, which the DRA manager of 1.37 then calls with its
	// own v1alpha1 client (pickHealthService, drahealthv1.V1Alpha1ClientWrapper).
	HealthServices []string
}

// StartKubelet starts the DRA manager and the plugin manager. Starting it
// makes the DRA manager delete all ResourceSlices of the node, as a
// starting kubelet does.
func StartKubelet(ctx context.Context, o KubeletOptions) (*Kubelet, error) {
	logger := o.Logger
	if logger.GetSink() == nil {
		logger = klog.Background()
	}
	ctx, cancel := context.WithCancel(klog.NewContext(ctx, logger))
	manager, err := dra.NewManager(logger, o.Client, o.StateDir)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("kubelet DRA manager on %s: %w", o.StateDir, err)
	}
	k := &Kubelet{DRA: manager, cancel: cancel, stopCh: make(chan struct{}), pods: map[string]*corev1.Pod{}}
	for _, p := range o.ActivePods {
		k.pods[string(p.UID)] = p
	}
	getNode := func(ctx context.Context) (*corev1.Node, error) {
		return o.Client.CoreV1().Nodes().Get(ctx, o.NodeName, metav1.GetOptions{})
	}
	// The harness is the only pod source and has seen everything it will.
	sourcesReady := config.NewSourcesReady(func(sets.Set[string]) bool { return true })
	if err := manager.Start(ctx, k.activePods, getNode, sourcesReady); err != nil {
		cancel()
		return nil, fmt.Errorf("start kubelet DRA manager: %w", err)
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: o.NodeName})
	plugins := pluginmanager.NewPluginManager(o.RegistryDir, recorder)
	k.registrations = &registrations{PluginHandler: manager.GetWatcherHandler(), healthKnown: o.HealthServices, changed: make(chan struct{})}
	plugins.AddHandler(pluginwatcherapi.DRAPlugin, k.registrations)
	k.done.Add(1)
	go func() {
		defer k.done.Done()
		plugins.Run(ctx, sourcesReady, k.stopCh)
	}()
	return k, nil
}

// Stop stops the plugin manager and the DRA manager (a kubelet going
// down); its checkpoint stays in StateDir.
func (k *Kubelet) Stop() {
	close(k.stopCh)
	k.cancel()
	k.done.Wait()
	k.DRA.Stop()
}

// SetActive records pod as running on the node (for the DRA manager's
// reconcile loop, which unprepares claims of pods that are gone).
func (k *Kubelet) SetActive(pod *corev1.Pod, active bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if active {
		k.pods[string(pod.UID)] = pod
	} else {
		delete(k.pods, string(pod.UID))
	}
}

// WaitEndpoints waits until the kubelet has n endpoints of driver
// registered: the plugin manager's registrations and deregistrations, as
// they reach the DRA manager.
func (k *Kubelet) WaitEndpoints(ctx context.Context, driver string, n int) error {
	for {
		endpoints, changed := k.registrations.of(driver)
		if len(endpoints) == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d registered endpoints of %s, the kubelet has %v: %w", n, driver, endpoints, ctx.Err())
		case <-changed:
		}
	}
}

// registrations passes the plugin manager's calls on to the DRA manager's
// handler and keeps the endpoints it registered, by driver.
type registrations struct {
	cache.PluginHandler
	healthKnown []string // nil: every health service the DRA manager knows

	mu       sync.Mutex
	byDriver map[string][]string
	changed  chan struct{} // closed and replaced at every change
}

// healthServices are the device-health services of the kubelet's DRA
// manager, most recent first.
var healthServices = []string{drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService}

func (r *registrations) RegisterPlugin(ctx context.Context, driver, endpoint string, versions []string, timeout *time.Duration) error {
	if r.healthKnown != nil {
		versions = slices.DeleteFunc(slices.Clone(versions), func(v string) bool {
			return slices.Contains(healthServices, v) && !slices.Contains(r.healthKnown, v)
		})
	}
	if err := r.PluginHandler.RegisterPlugin(ctx, driver, endpoint, versions, timeout); err != nil {
		return err
	}
	r.update(driver, func(e []string) []string { return append(e, endpoint) })
	return nil
}

func (r *registrations) DeRegisterPlugin(ctx context.Context, driver, endpoint string) {
	r.PluginHandler.DeRegisterPlugin(ctx, driver, endpoint)
	r.update(driver, func(e []string) []string { return slices.DeleteFunc(e, func(s string) bool { return s == endpoint }) })
}

func (r *registrations) update(driver string, change func([]string) []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byDriver == nil {
		r.byDriver = map[string][]string{}
	}
	r.byDriver[driver] = change(r.byDriver[driver])
	close(r.changed)
	r.changed = make(chan struct{})
}

// of is driver's registered endpoints and a channel closed at the next change.
func (r *registrations) of(driver string) ([]string, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.byDriver[driver]), r.changed
}

// ActivePods lists the pods recorded as running.
func (k *Kubelet) ActivePods() []*corev1.Pod { return k.activePods() }

func (k *Kubelet) activePods() []*corev1.Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(k.pods))
	for _, p := range k.pods {
		out = append(out, p)
	}
	return out
}

// CDIDevices prepares nothing: it returns the CDI IDs the DRA manager hands
// the container runtime for every container of a prepared pod.
func (k *Kubelet) CDIDevices(pod *corev1.Pod) ([]string, error) {
	var ids []string
	for i := range pod.Spec.Containers {
		info, err := k.DRA.GetResources(pod, &pod.Spec.Containers[i])
		if err != nil {
			return nil, fmt.Errorf("pod %s container %s: %w", pod.Name, pod.Spec.Containers[i].Name, err)
		}
		for _, d := range info.CDIDevices {
			ids = append(ids, d.Name)
		}
	}
	return ids, nil
}

// Prepare runs the DRA manager's PrepareResources for pod, retrying as the
// kubelet's pod workers do until it succeeds or timeout passes. It returns
// how many attempts it made.
func (k *Kubelet) Prepare(ctx context.Context, pod *corev1.Pod, timeout time.Duration) (int, error) {
	var attempts int
	err := Poll(ctx, 200*time.Millisecond, timeout, "prepare pod "+pod.Name, func(ctx context.Context) (bool, error) {
		attempts++
		if err := k.DRA.PrepareResources(ctx, pod); err != nil {
			return false, err
		}
		return true, nil
	})
	if err != nil {
		return attempts, fmt.Errorf("%w (%d attempts)", err, attempts)
	}
	return attempts, nil
}

// PrepareAll prepares pods concurrently, as the kubelet's pod workers do,
// and returns every failure.
func (k *Kubelet) PrepareAll(ctx context.Context, pods []*corev1.Pod, timeout time.Duration) error {
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() { _, errs[i] = k.Prepare(ctx, p, timeout) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
