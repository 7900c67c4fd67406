package piecemeal_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/dranode/dranode/cdi"
	"github.com/dranode/dranode/examples/piecemeal-driver/driver"
	"github.com/dranode/dranode/tools/envtest"
)

const (
	testDriver = "piecemeal.example.com"
	testNode   = "node-a"
)

// Run against a real kube-apiserver, called over its sockets with the
// kubelet's gRPC API: it publishes the devices through sliceclient,
// registers as a DRA plugin, prepares a claim it reads from the API
// server (the helper does), and returns nil when its context ends. The
// kubelet's own code judges it in compat/e2e/piecemeal.
func TestRunServesTheKubeletAPI(t *testing.T) {
	restCfg := envtest.StartT(t, &envtest.Environment{})
	client := kubernetes.NewForConfigOrDie(restCfg)
	ctx := t.Context()
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	root := t.TempDir()
	cfg := driver.Config{
		DriverName: testDriver, NodeName: testNode, NumDevices: 4,
		DevRoot: filepath.Join(root, "dev"), CDIDir: filepath.Join(root, "cdi"),
		StateDir: filepath.Join(root, "state"), BootID: "boot-1",
	}
	kubeletDir, err := os.MkdirTemp("", "pm-kubelet-") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(kubeletDir) })
	o := driver.Options{Config: cfg, Client: client, RegistryDir: filepath.Join(kubeletDir, "registry"), PluginsDir: filepath.Join(kubeletDir, "plugins")}
	// The kubelet creates its registry directory; the driver does not.
	if err := os.MkdirAll(o.RegistryDir, 0o750); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- driver.Run(runCtx, o) }()
	t.Cleanup(func() {
		stop()
		<-done
	})

	// Slices, from sliceclient.
	waitFor(t, done, "the driver's slices", func() (bool, error) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: resourceapi.ResourceSliceSelectorDriver + "=" + testDriver})
		if err != nil {
			return false, err
		}
		n := 0
		for _, s := range list.Items {
			n += len(s.Spec.Devices)
		}
		return n == cfg.NumDevices, fmt.Errorf("%d devices published, want %d", n, cfg.NumDevices)
	})

	// Registration, from the helper.
	regSock := filepath.Join(o.RegistryDir, testDriver+"-reg.sock")
	waitFor(t, done, "the registration socket", func() (bool, error) {
		_, err := os.Stat(regSock)
		return err == nil, err
	})
	reg := dial(t, regSock)
	info, err := registerapi.NewRegistrationClient(reg).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != testDriver || !slices.Contains(info.SupportedVersions, drapbv1.DRAPluginService) {
		t.Fatalf("registration info %+v", info)
	}

	// A prepare through the DRA service, for a claim in the API server.
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gpu"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu"},
		}}}},
	}
	claim, err = client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: testDriver, Pool: testNode, Device: "gpu-2"}},
	}}
	if claim, err = client.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	dra := drapbv1.NewDRAPluginClient(dial(t, info.Endpoint))
	req := &drapbv1.Claim{Namespace: "default", Name: "gpu", Uid: string(claim.UID)}
	resp, err := dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{req}})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Claims[string(claim.UID)]
	want := testDriver + "/claim=" + string(claim.UID) + "-gpu-2"
	if got == nil || got.Error != "" || len(got.Devices) != 1 || !slices.Equal(got.Devices[0].CdiDeviceIds, []string{want}) {
		t.Fatalf("prepare answered %v, want device gpu-2 with CDI ID %s", got, want)
	}
	specs := cdi.SpecDir{Path: cfg.CDIDir}
	readSpec(t, specs, string(claim.UID))
	// Unprepare after the claim is gone from the API server.
	if err := client.ResourceV1().ResourceClaims("default").Delete(ctx, "gpu", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	uresp, err := dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{req}})
	if err != nil {
		t.Fatal(err)
	}
	if r := uresp.Claims[string(claim.UID)]; r == nil || r.Error != "" {
		t.Fatalf("unprepare answered %v", r)
	}
	if path, exists, err := specs.Lookup(testDriver, cdi.ClaimClass, string(claim.UID)); exists || err != nil {
		t.Errorf("spec after unprepare: %s exists %v, %v", path, exists, err)
	}

	stop()
	if err := <-done; err != nil {
		t.Errorf("Run after its context ended: %v", err)
	}
	done <- nil // for the cleanup
}

// readSpec loads the claim's spec file as a runtime would (strictly) and
// returns it.
func readSpec(t *testing.T, specs cdi.SpecDir, uid string) *cdi.Spec {
	t.Helper()
	path, exists, err := specs.Lookup(testDriver, cdi.ClaimClass, uid)
	if err != nil || !exists {
		t.Fatalf("CDI spec of claim %s: exists %v, %v", uid, exists, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := cdi.DecodeSpec(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	return spec
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// waitFor polls cond until it holds, failing the test when Run returned
// meanwhile or after a minute (a hang, not a speed limit).
func waitFor(t *testing.T, done chan error, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, err := cond()
		if ok {
			return
		}
		select {
		case runErr := <-done:
			done <- runErr
			t.Fatalf("waiting for %s: Run returned %v", what, runErr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
