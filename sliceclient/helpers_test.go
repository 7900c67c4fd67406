package sliceclient

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

const (
	testDriver = "gpu.example.com"
	testNode   = "node-1"
)

// memServer applies plans the way the API server would, assigning resource
// versions and UIDs, so planner tests can run a scenario step by step.
type memServer struct {
	rv     int
	slices map[string]*resourceapi.ResourceSlice
}

func newMemServer() *memServer { return &memServer{slices: map[string]*resourceapi.ResourceSlice{}} }

func (m *memServer) stored(pool string) []*storedSlice {
	var out []*storedSlice
	for _, s := range m.slices {
		if s.Spec.Pool.Name == pool {
			out = append(out, newStoredSlice(s))
		}
	}
	return out
}

func (m *memServer) apply(p *poolPlan) error {
	for _, d := range p.deletes {
		if _, ok := m.slices[d.Name]; !ok {
			return fmt.Errorf("delete of missing %s", d.Name)
		}
		delete(m.slices, d.Name)
	}
	for _, w := range p.updates {
		cur, ok := m.slices[w.obj.Name]
		if !ok || cur.ResourceVersion != w.obj.ResourceVersion {
			return fmt.Errorf("update of %s: conflict", w.obj.Name)
		}
		m.rv++
		obj := w.obj.DeepCopy()
		obj.ResourceVersion = strconv.Itoa(m.rv)
		m.slices[obj.Name] = obj
	}
	for _, w := range p.creates {
		if _, ok := m.slices[w.obj.Name]; ok {
			return fmt.Errorf("create of existing %s", w.obj.Name)
		}
		m.rv++
		obj := w.obj.DeepCopy()
		obj.ResourceVersion = strconv.Itoa(m.rv)
		obj.UID = types.UID("uid-" + obj.ResourceVersion)
		m.slices[obj.Name] = obj
	}
	return nil
}

var testOwner = metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: testNode, UID: "node-uid", Controller: ptrTo(true)}

// fakeClient is only for option checks that never reach an API server.
func fakeClient() Client { return clientOf(fake.NewClientset()) }

func clientOf(cs kubernetes.Interface) Client {
	return Client{ResourceSlices: cs.ResourceV1().ResourceSlices(), Nodes: cs.CoreV1().Nodes()}
}

// TestMain turns off client-go's streaming initial list (WatchListClient)
// for the whole test binary: the fake clientset's watch never sends the
// bookmark that ends it, and the typed client in a Client cannot say so
// (only the fake Clientset itself implements IsWatchListSemanticsUnSupported).
// client-go reads the gate once, so it is set before any test runs.
func TestMain(m *testing.M) {
	os.Setenv("KUBE_FEATURE_WatchListClient", "false")
	os.Exit(m.Run())
}
