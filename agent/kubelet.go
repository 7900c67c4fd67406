package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/dranode/dranode/pluginmgr"
	"github.com/dranode/dranode/sliceclient"
)

// SocketMode is the mode of the agent's sockets: the kubelet (root) connects;
// nobody else may.
const SocketMode fs.FileMode = 0o660

// driver is one DRA driver served to the kubelet.
type driver struct {
	name      string
	plugin    *pluginmgr.Plugin
	publisher *sliceclient.Publisher
	health    bool // the plugin reports health
	healthy   *healthFeed
	taints    healthTaints // what is published: the plugin's inventory with its unhealthy devices tainted

	regPath, draPath string
	regSrv, draSrv   *grpc.Server
	serving          atomic.Bool
	registered       atomic.Bool
}

// RegistrationSocket is where the kubelet's plugin watcher finds the driver.
func RegistrationSocket(registryDir, driverName string) string {
	return filepath.Join(registryDir, driverName+"-reg.sock")
}

// DRASocket is the driver's DRA service endpoint.
func DRASocket(pluginsDir, driverName string) string {
	return filepath.Join(pluginsDir, driverName, "dra.sock")
}

// serve opens the DRA socket first and the registration socket last, so the
// kubelet never learns of an endpoint that is not listening yet.
func (d *driver) serve(a *Agent) error {
	d.draPath = DRASocketFor(a.cfg.Kubelet.PluginsDir, d.name, a.cfg.Kubelet.InstanceID)
	d.regPath = RegistrationSocketFor(a.cfg.Kubelet.RegistryDir, d.name, a.cfg.Kubelet.InstanceID)
	if a.cfg.Kubelet.InstanceID != "" {
		a.removeStaleSockets(d)
	}
	draLis, err := listenUnix(d.draPath)
	if err != nil {
		return fmt.Errorf("driver %s: DRA socket: %w", d.name, err)
	}
	d.draSrv = grpc.NewServer()
	svc := &draService{a: a, d: d}
	drapbv1.RegisterDRAPluginServer(d.draSrv, svc)
	drapbv1beta1.RegisterDRAPluginServer(d.draSrv, drapbv1beta1.V1ServerWrapper{DRAPluginServer: svc})
	if d.health {
		drahealthv1.RegisterDRAResourceHealthServer(d.draSrv, &healthService{d: d})
	}
	go func() { _ = d.draSrv.Serve(draLis) }()

	regLis, err := listenUnix(d.regPath)
	if err != nil {
		return fmt.Errorf("driver %s: registration socket: %w", d.name, err)
	}
	d.regSrv = grpc.NewServer()
	registerapi.RegisterRegistrationServer(d.regSrv, &registrationService{a: a, d: d})
	go func() { _ = d.regSrv.Serve(regLis) }()
	d.serving.Store(true)
	return nil
}

// SupportedServices are the gRPC services the agent announces at
// registration, most recent first, as the kubelet's DRA plugin manager
// expects them ("<proto package>.<service>").
func (d *driver) supportedServices() []string {
	s := []string{drapbv1.DRAPluginService, drapbv1beta1.DRAPluginService}
	if d.health {
		s = append(s, drahealthv1.DRAResourceHealthService)
	}
	return s
}

func (d *driver) stopRegistration() {
	if d.regSrv != nil {
		d.regSrv.Stop()
		_ = os.Remove(d.regPath)
	}
	d.registered.Store(false)
}

func (d *driver) stopDRA() {
	if d.draSrv != nil {
		d.draSrv.GracefulStop()
		_ = os.Remove(d.draPath)
	}
	d.healthy.close()
}

func (d *driver) forceStop() {
	if d.draSrv != nil {
		d.draSrv.Stop()
	}
}

// MaxSocketPath is the longest path a unix socket can be dialed at on Linux
// (sun_path is 108 bytes with the terminating NUL).
const MaxSocketPath = 107

// ErrSocketPathTooLong is wrapped by the error of a driver whose kubelet
// socket path would be longer than MaxSocketPath.
var ErrSocketPathTooLong = errors.New("unix socket path too long")

// listenUnix listens on path with SocketMode and no window in which the
// socket exists with other permissions: it binds in a private (0700)
// directory next to path, sets the mode, and renames the socket into place,
// replacing a stale socket. Something at path that is not a socket is an
// error, never removed.
func listenUnix(path string) (net.Listener, error) {
	// Binding elsewhere and renaming would succeed with any length, and
	// leave a socket no client can dial ("connect: invalid argument").
	if len(path) > MaxSocketPath {
		return nil, fmt.Errorf("%w: %s is %d bytes, at most %d: shorten the kubelet's directories, the driver name or kubelet.instanceID", ErrSocketPathTooLong, path, len(path), MaxSocketPath)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("%s exists and is not a socket (%s); not replacing it", path, fi.Mode().Type())
	}
	tmpDir, err := os.MkdirTemp(dir, ".sock-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "s")
	lis, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, err
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, SocketMode); err != nil {
		lis.Close()
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		lis.Close()
		return nil, err
	}
	return lis, nil
}

type registrationService struct {
	registerapi.UnimplementedRegistrationServer
	a *Agent
	d *driver
}

func (r *registrationService) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.DRAPlugin,
		Name:              r.d.name,
		Endpoint:          r.d.draPath,
		SupportedVersions: r.d.supportedServices(),
	}, nil
}

func (r *registrationService) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	log := r.a.log.WithValues("driver", r.d.name)
	if st.PluginRegistered {
		log.Info("Registered with the kubelet")
	} else {
		log.Error(errors.New(st.Error), "The kubelet refused the registration")
	}
	r.d.registered.Store(st.PluginRegistered)
	return &registerapi.RegistrationStatusResponse{}, nil
}

type draService struct {
	drapbv1.UnimplementedDRAPluginServer
	a *Agent
	d *driver
}

// begin admits a call unless the agent is stopping.
func (s *draService) begin() (func(), error) {
	s.a.inflight.Add(1)
	if s.a.stopping.Load() {
		s.a.inflight.Done()
		return nil, status.Error(codes.Unavailable, ErrStopping.Error())
	}
	s.a.callBegin() // device status writes yield to the call
	return s.end, nil
}

func (s *draService) end() {
	s.a.callEnd()
	s.a.inflight.Done()
}

func (s *draService) NodePrepareResources(ctx context.Context, req *drapbv1.NodePrepareResourcesRequest) (*drapbv1.NodePrepareResourcesResponse, error) {
	done, err := s.begin()
	if err != nil {
		return nil, err
	}
	defer done()
	// During a rolling upgrade the instance holding the claim record
	// answers; routeCall forwards to it when that is another instance.
	return routeCall(ctx, s.a, s.d, func(ctx context.Context) *drapbv1.NodePrepareResourcesResponse { return s.prepareHere(ctx, req) },
		func(ctx context.Context, c drapbv1.DRAPluginClient) (*drapbv1.NodePrepareResourcesResponse, error) {
			return c.NodePrepareResources(ctx, req)
		})
}

func (s *draService) prepareHere(ctx context.Context, req *drapbv1.NodePrepareResourcesRequest) *drapbv1.NodePrepareResourcesResponse {
	claims := eachClaim(ctx, s.a.log.WithValues("driver", s.d.name, "requestID", newRequestID()), req.Claims,
		func(ctx context.Context, c *drapbv1.Claim) *drapbv1.NodePrepareResourceResponse {
			start := time.Now()
			devs, err := s.a.Prepare(ctx, s.d.name, ClaimRequest{Namespace: c.Namespace, Name: c.Name, UID: c.Uid})
			s.a.metrics.observePrepare(s.d.name, time.Since(start), err)
			r := &drapbv1.NodePrepareResourceResponse{}
			if err != nil {
				logr.FromContextOrDiscard(ctx).Error(err, "Prepare failed")
				r.Error = errorForKubelet(err)
			}
			for _, dv := range devs {
				pd := &drapbv1.Device{RequestNames: dv.Requests, PoolName: dv.Pool, DeviceName: dv.Device, CdiDeviceIds: dv.CDIDeviceIDs}
				if dv.ShareID != "" {
					pd.ShareId = &dv.ShareID
				}
				r.Devices = append(r.Devices, pd)
			}
			return r
		})
	return &drapbv1.NodePrepareResourcesResponse{Claims: claims}
}

func (s *draService) NodeUnprepareResources(ctx context.Context, req *drapbv1.NodeUnprepareResourcesRequest) (*drapbv1.NodeUnprepareResourcesResponse, error) {
	done, err := s.begin()
	if err != nil {
		return nil, err
	}
	defer done()
	return routeCall(ctx, s.a, s.d, func(ctx context.Context) *drapbv1.NodeUnprepareResourcesResponse { return s.unprepareHere(ctx, req) },
		func(ctx context.Context, c drapbv1.DRAPluginClient) (*drapbv1.NodeUnprepareResourcesResponse, error) {
			return c.NodeUnprepareResources(ctx, req)
		})
}

func (s *draService) unprepareHere(ctx context.Context, req *drapbv1.NodeUnprepareResourcesRequest) *drapbv1.NodeUnprepareResourcesResponse {
	claims := eachClaim(ctx, s.a.log.WithValues("driver", s.d.name, "requestID", newRequestID()), req.Claims,
		func(ctx context.Context, c *drapbv1.Claim) *drapbv1.NodeUnprepareResourceResponse {
			start := time.Now()
			err := s.a.Unprepare(ctx, c.Uid)
			s.a.metrics.observeUnprepare(s.d.name, time.Since(start), err)
			r := &drapbv1.NodeUnprepareResourceResponse{}
			if err != nil {
				logr.FromContextOrDiscard(ctx).Error(err, "Unprepare failed")
				r.Error = errorForKubelet(err)
			}
			return r
		})
	return &drapbv1.NodeUnprepareResourcesResponse{Claims: claims}
}

// eachClaim answers every claim of one kubelet call concurrently (different
// claims never wait for each other; one claim's calls are serialized further
// down, by the claim record) and collects the answers by claim UID. Each
// call's context carries a logger naming the claim.
func eachClaim[R any](ctx context.Context, log logr.Logger, claims []*drapbv1.Claim, answer func(context.Context, *drapbv1.Claim) R) map[string]R {
	out := make(map[string]R, len(claims))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range claims {
		wg.Go(func() {
			clog := log.WithValues("claimUID", c.Uid, "claim", c.Namespace+"/"+c.Name)
			r := answer(logr.NewContext(ctx, clog), c)
			mu.Lock()
			out[c.Uid] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// errorForKubelet marks retryable failures in the per-claim error text (the
// kubelet retries every failed claim on its next pod sync either way).
func errorForKubelet(err error) string {
	if errors.Is(err, pluginmgr.ErrPluginUnavailable) {
		return "retryable: " + err.Error()
	}
	return err.Error()
}

// healthFeed holds a driver's latest health snapshot and wakes watchers on
// every change.
type healthFeed struct {
	mu      sync.Mutex
	snap    []pluginmgr.DeviceHealth
	changed chan struct{}
	closed  bool
}

func newHealthFeed() *healthFeed { return &healthFeed{changed: make(chan struct{})} }

func (h *healthFeed) set(s []pluginmgr.DeviceHealth) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.snap = s
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *healthFeed) get() ([]pluginmgr.DeviceHealth, <-chan struct{}, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.snap, h.changed, h.closed
}

func (h *healthFeed) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.changed)
	}
}

type healthService struct {
	drahealthv1.UnimplementedDRAResourceHealthServer
	d *driver
}

func (s *healthService) NodeWatchResources(_ *drahealthv1.NodeWatchResourcesRequest, stream grpc.ServerStreamingServer[drahealthv1.NodeWatchResourcesResponse]) error {
	for {
		snap, changed, closed := s.d.healthy.get()
		if closed {
			return status.Error(codes.Unavailable, ErrStopping.Error())
		}
		if snap != nil {
			resp := &drahealthv1.NodeWatchResourcesResponse{}
			now := time.Now().Unix()
			for _, h := range snap {
				resp.Devices = append(resp.Devices, &drahealthv1.DeviceHealth{
					Device:          &drahealthv1.DeviceIdentifier{PoolName: h.Pool, DeviceName: h.Device},
					Health:          healthStatus(h.Status),
					LastUpdatedTime: now,
					Message:         h.Message,
				})
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

func healthStatus(s pluginmgr.HealthStatus) drahealthv1.HealthStatus {
	switch s {
	case pluginmgr.Healthy:
		return drahealthv1.HealthStatus_HEALTHY
	case pluginmgr.Unhealthy:
		return drahealthv1.HealthStatus_UNHEALTHY
	default:
		return drahealthv1.HealthStatus_UNKNOWN
	}
}
