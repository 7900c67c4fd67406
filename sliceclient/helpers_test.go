package sliceclient

import (
	"fmt"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

const (
	testDriver = "gpu.example.com"
	testNode   = "node-1"
)

func testDevice(name string, model string) resourceapi.Device {
	return resourceapi.Device{
		Name: name,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"model":                 {StringValue: &model},
			"gpu.example.com/index": {IntValue: ptrTo(int64(len(name)))},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory": {Value: resource.MustParse("16Gi")},
		},
	}
}

func testDevices(prefix string, n int) []resourceapi.Device {
	out := make([]resourceapi.Device, n)
	for i := range out {
		out[i] = testDevice(prefix+strconv.Itoa(i), "a100")
	}
	return out
}

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
