package sliceclient

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dranode/dranode/inventory"
	"github.com/dranode/dranode/sliceclient"
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

const testDriver = "gpu.example.com"

// publisherAgent is the user agent of the publishers' clients, which the
// audit log records: it tells their writes from the test's own.
const publisherAgent = "sliceclient-under-test"

// One control plane, with an audit log of every write, serves every test in
// the package; each test uses its own Node, so they do not see each other's
// slices.
var (
	envOnce   sync.Once
	envShared *envtest.Environment
	envConfig *rest.Config
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

// controlPlane returns a client for the test's own reads and writes. It
// fails the test (never skips) when the control plane cannot start, with
// envtest's message saying where binaries were looked for.
func controlPlane(t *testing.T) kubernetes.Interface {
	t.Helper()
	envOnce.Do(func() {
		envShared = &envtest.Environment{Audit: true}
		cfg, err := envShared.Start()
		if err != nil {
			envErr = fmt.Errorf("starting the control plane (build it with `make -C <repo> controlplane`): %w", err)
			envShared = nil
			return
		}
		cfg.QPS, cfg.Burst = -1, -1
		envConfig = cfg
	})
	if envErr != nil {
		t.Fatal(envErr)
	}
	return kubernetes.NewForConfigOrDie(envConfig)
}

// publisherClient is a sliceclient.Client whose writes the audit log
// attributes to publisherAgent; cfg defaults to the shared control plane's.
func publisherClient(t *testing.T, cfg *rest.Config) sliceclient.Client {
	t.Helper()
	if cfg == nil {
		controlPlane(t)
		cfg = envConfig
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = publisherAgent
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sliceclient.Client{ResourceSlices: c.ResourceV1().ResourceSlices(), Nodes: c.CoreV1().Nodes()}
}

// writes counts, from the API server's audit log, the successful writes
// publishers made to the slices of node: what reached the server, not what
// a publisher says it did.
type writes struct{ Creates, Updates, Deletes int64 }

func auditedWrites(t *testing.T, node string) writes {
	t.Helper()
	events, err := envShared.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	prefix := node + "-" + testDriver + "-"
	var w writes
	for _, ev := range events {
		if ev.UserAgent != publisherAgent || ev.Stage != "ResponseComplete" || ev.ObjectRef == nil ||
			ev.ObjectRef.Resource != "resourceslices" || ev.ResponseStatus == nil || ev.ResponseStatus.Code >= 300 {
			continue
		}
		// The server fills in a create's name from the object sent.
		if !strings.HasPrefix(ev.ObjectRef.Name, prefix) {
			continue
		}
		switch ev.Verb {
		case "create":
			w.Creates++
		case "update":
			w.Updates++
		case "delete":
			w.Deletes++
		}
	}
	return w
}

func (w writes) minus(o writes) writes {
	return writes{w.Creates - o.Creates, w.Updates - o.Updates, w.Deletes - o.Deletes}
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

// startPublisher starts a publisher for node with inv and waits for its
// first sync. A nil onError logs errors.
func startPublisher(t *testing.T, opts sliceclient.Options, inv inventory.Inventory) *sliceclient.Publisher {
	t.Helper()
	if opts.Client.ResourceSlices == nil {
		opts.Client = publisherClient(t, nil)
	}
	if opts.DriverName == "" {
		opts.DriverName = testDriver
	}
	if opts.OnError == nil {
		node := opts.NodeName
		opts.OnError = func(err error) { t.Logf("publisher for %s: %v", node, err) }
	}
	p, err := sliceclient.New(opts)
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

func waitSynced(t *testing.T, p *sliceclient.Publisher) {
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

// poolMatches reports why the stored slices are not exactly the pool, or ""
// when they are: one generation, the right count, every device once with
// the wanted content.
func poolMatches(slices []resourceapi.ResourceSlice, pool inventory.Pool) string {
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

func waitPool(t *testing.T, c kubernetes.Interface, node string, pool inventory.Pool) []resourceapi.ResourceSlice {
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

func ptrTo[T any](v T) *T { return &v }
