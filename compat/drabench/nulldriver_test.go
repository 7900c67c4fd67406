package drabench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"google.golang.org/grpc"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The null driver is the floor: a DRA kubelet plugin, in a process of its
// own like every driver, that answers every prepare from memory at once
// (one device per claim, a CDI ID made from the claim's UID) and every
// unprepare with success. It reads nothing from the API server and writes
// nothing to disk, so what a prepare costs with it is what the kubelet's
// DRA manager, the gRPC round trip and the API server's share of the
// kubelet's own requests cost. Its slices are published by the benchmark.
// It is this test binary, started again with nullDriverEnv set.
const (
	nullDriverEnv = "DRABENCH_NULL_DRIVER" // the driver name
	nullNodeEnv   = "DRABENCH_NULL_NODE"
	nullRegEnv    = "DRABENCH_NULL_REGISTRY_DIR"
	nullPlugEnv   = "DRABENCH_NULL_PLUGINS_DIR"
)

func runNullDriver() int {
	driver := os.Getenv(nullDriverEnv)
	node := os.Getenv(nullNodeEnv)
	draPath := filepath.Join(os.Getenv(nullPlugEnv), driver, "dra.sock")
	regPath := filepath.Join(os.Getenv(nullRegEnv), driver+"-reg.sock")
	if err := serveNull(driver, node, draPath, regPath); err != nil {
		fmt.Fprintln(os.Stderr, "null driver:", err)
		return 1
	}
	return 0
}

func serveNull(driver, node, draPath, regPath string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := os.MkdirAll(filepath.Dir(draPath), 0o750); err != nil {
		return err
	}
	_ = os.Remove(draPath)
	_ = os.Remove(regPath)
	draLis, err := net.Listen("unix", draPath)
	if err != nil {
		return err
	}
	draSrv := grpc.NewServer()
	drapbv1.RegisterDRAPluginServer(draSrv, &nullDRA{driver: driver, pool: node})
	go func() { _ = draSrv.Serve(draLis) }()
	// Registration last: the kubelet never learns of an endpoint that is
	// not listening.
	regLis, err := net.Listen("unix", regPath)
	if err != nil {
		return err
	}
	regSrv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(regSrv, &nullRegistration{driver: driver, endpoint: draPath})
	go func() { _ = regSrv.Serve(regLis) }()
	fmt.Println("null driver serving", driver)
	<-ctx.Done()
	regSrv.Stop()
	draSrv.Stop()
	return nil
}

type nullRegistration struct {
	registerapi.UnimplementedRegistrationServer
	driver, endpoint string
}

func (r *nullRegistration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: r.driver, Endpoint: r.endpoint,
		SupportedVersions: []string{drapbv1.DRAPluginService}}, nil
}

func (r *nullRegistration) NotifyRegistrationStatus(context.Context, *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	return &registerapi.RegistrationStatusResponse{}, nil
}

type nullDRA struct {
	drapbv1.UnimplementedDRAPluginServer
	driver, pool string
}

func (n *nullDRA) NodePrepareResources(_ context.Context, req *drapbv1.NodePrepareResourcesRequest) (*drapbv1.NodePrepareResourcesResponse, error) {
	resp := &drapbv1.NodePrepareResourcesResponse{Claims: make(map[string]*drapbv1.NodePrepareResourceResponse, len(req.Claims))}
	for _, c := range req.Claims {
		resp.Claims[c.Uid] = &drapbv1.NodePrepareResourceResponse{Devices: []*drapbv1.Device{{
			RequestNames: []string{"req0"}, PoolName: n.pool, DeviceName: "gpu-0",
			CdiDeviceIds: []string{n.driver + "/claim=" + c.Uid + "-gpu-0"},
		}}}
	}
	return resp, nil
}

func (n *nullDRA) NodeUnprepareResources(_ context.Context, req *drapbv1.NodeUnprepareResourcesRequest) (*drapbv1.NodeUnprepareResourcesResponse, error) {
	resp := &drapbv1.NodeUnprepareResourcesResponse{Claims: make(map[string]*drapbv1.NodeUnprepareResourceResponse, len(req.Claims))}
	for _, c := range req.Claims {
		resp.Claims[c.Uid] = &drapbv1.NodeUnprepareResourceResponse{}
	}
	return resp, nil
}
