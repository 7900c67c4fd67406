package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/dranode/dranode/tools/envtest"
)

// writeKubeconfig turns the control plane's admin config into the file an
// operator would pass with --kubeconfig.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, InsecureSkipTLSVerify: cfg.Insecure}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func slice(name, node, driver, pool string, generation, count int64, devices int) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{
			Driver: driver, NodeName: &node,
			Pool: resourcev1.ResourcePool{Name: pool, Generation: generation, ResourceSliceCount: count},
		},
	}
	for i := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("%s-dev-%d", name, i)})
	}
	return s
}

// TestAPIServerCommands runs the commands that ask the API server against
// one control plane.
func TestAPIServerCommands(t *testing.T) {
	cfg := envtest.StartT(t, &envtest.Environment{})
	client := kubernetes.NewForConfigOrDie(cfg)
	kubeconfig := writeKubeconfig(t, cfg)
	t.Run("slices", func(t *testing.T) { testSlices(t, client, kubeconfig) })
	t.Run("record leftovers", func(t *testing.T) { testRecordLeftoversAsksAPIServer(t, client, kubeconfig) })
}

func testSlices(t *testing.T, client kubernetes.Interface, kubeconfig string) {
	for _, s := range []*resourcev1.ResourceSlice{
		slice("a-gpu-1", "node-a", "gpu.example.com", "node-a", 2, 2, 3),
		slice("a-gpu-2", "node-a", "gpu.example.com", "node-a", 2, 2, 2),
		slice("a-gpu-old", "node-a", "gpu.example.com", "node-a", 1, 1, 4),
		slice("a-nic-1", "node-a", "nic.example.com", "rdma", 5, 2, 1),
		slice("b-gpu-1", "node-b", "gpu.example.com", "node-b", 1, 1, 8),
	} {
		if _, err := client.ResourceV1().ResourceSlices().Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	r := dranodectl(t, "slices", "--kubeconfig", kubeconfig, "--node", "node-a", "-o", "json")
	wantCode(t, r, 0)
	rep := mustJSON[slicesReport](t, r)
	want := []poolSummary{
		{Driver: "gpu.example.com", Pool: "node-a", Generation: 2, Slices: 2, SliceCount: 2, Devices: 5, Complete: true, Stale: 1, Names: []string{"a-gpu-1", "a-gpu-2"}},
		{Driver: "nic.example.com", Pool: "rdma", Generation: 5, Slices: 1, SliceCount: 2, Devices: 1, Complete: false, Names: []string{"a-nic-1"}},
	}
	if len(rep.Pools) != len(want) {
		t.Fatalf("pools %+v, want %+v", rep.Pools, want)
	}
	for i := range want {
		g, w := rep.Pools[i], want[i]
		if g.Driver != w.Driver || g.Pool != w.Pool || g.Generation != w.Generation || g.Slices != w.Slices ||
			g.SliceCount != w.SliceCount || g.Devices != w.Devices || g.Complete != w.Complete || g.Stale != w.Stale || !slices.Equal(g.Names, w.Names) {
			t.Errorf("pool %d: %+v, want %+v", i, g, w)
		}
	}

	t.Run("driver filter and table", func(t *testing.T) {
		r := dranodectl(t, "slices", "--kubeconfig", kubeconfig, "--node", "node-a", "--driver", "nic.example.com")
		wantCode(t, r, 0)
		if !strings.Contains(r.stdout, "nic.example.com") || strings.Contains(r.stdout, "gpu.example.com") {
			t.Errorf("table:\n%s", r.stdout)
		}
	})
	t.Run("yaml", func(t *testing.T) {
		r := dranodectl(t, "slices", "--kubeconfig", kubeconfig, "--node", "node-b", "-o", "yaml")
		wantCode(t, r, 0)
		if !strings.Contains(r.stdout, "pool: node-b") || !strings.Contains(r.stdout, "devices: 8") {
			t.Errorf("yaml:\n%s", r.stdout)
		}
	})
	t.Run("failures", func(t *testing.T) {
		wantCode(t, dranodectl(t, "slices", "--kubeconfig", kubeconfig), 2, "--node is required")
		wantCode(t, dranodectl(t, "slices", "--kubeconfig", filepath.Join(t.TempDir(), "none"), "--node", "n"), 1, "kubeconfig")
		wantCode(t, dranodectl(t, "slices", "--kubeconfig", kubeconfig, "--node", "n", "-o", "xml"), 2, "table, json or yaml")
	})
}
