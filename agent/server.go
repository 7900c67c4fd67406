package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/dranode/dranode/pluginmgr"
)

// SocketMode is the mode of the agent's sockets: the kubelet (root) connects;
// nobody else may.
const SocketMode fs.FileMode = 0o660

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
	d.draSrv = grpc.NewServer(grpc.UnaryInterceptor(a.admit))
	svc := &routedService{a: a, d: d, local: &draService{a: a, d: d}}
	drapbv1.RegisterDRAPluginServer(d.draSrv, svc)
	drapbv1beta1.RegisterDRAPluginServer(d.draSrv, drapbv1beta1.V1ServerWrapper{DRAPluginServer: svc})
	if d.health {
		registerHealth(d.draSrv, &healthService{d: d})
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

// healthServices are the versions of the kubelet's device-health service
// the agent serves, most recent first. The kubelets of 1.34 to 1.36 call
// v1alpha1 whatever a plugin announces (their pkg/kubelet/cm/dra/plugin
// dials it on every registration, when ResourceHealthStatus is on: alpha
// and off by default before 1.36, beta and on in 1.36); the kubelet of
// 1.37 calls the first of v1 and v1alpha1 that the plugin announces.
var healthServices = []string{drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService}

// registerHealth serves every version of healthServices from one v1
// implementation; v1alpha1's messages are v1's under another package name
// (k8s.io/kubelet's V1ServerWrapper converts them field by field).
func registerHealth(srv *grpc.Server, h drahealthv1.DRAResourceHealthServer) {
	drahealthv1.RegisterDRAResourceHealthServer(srv, h)
	drahealthv1alpha1.RegisterDRAResourceHealthServer(srv, drahealthv1.V1ServerWrapper{Server: h})
}

// SupportedServices are the gRPC services the agent announces at
// registration, most recent first, as the kubelet's DRA plugin manager
// expects them ("<proto package>.<service>").
func (d *driver) supportedServices() []string {
	s := []string{drapbv1.DRAPluginService, drapbv1beta1.DRAPluginService}
	if d.health {
		s = append(s, healthServices...)
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

// draService answers the kubelet's DRA calls from this instance's record;
// routedService (routing.go) wraps it.
type draService struct {
	drapbv1.UnimplementedDRAPluginServer
	a *Agent
	d *driver
}

// admit is the DRA server's interceptor: it counts a call in flight, so
// that Stop waits for it, unless the agent is stopping.
func (a *Agent) admit(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	a.life.inflight.Add(1)
	defer a.life.inflight.Done()
	if a.life.stopping.Load() {
		return nil, status.Error(codes.Unavailable, ErrStopping.Error())
	}
	a.callBegin() // device status writes yield to the call
	defer a.callEnd()
	return handler(ctx, req)
}

func (s *draService) NodePrepareResources(ctx context.Context, req *drapbv1.NodePrepareResourcesRequest) (*drapbv1.NodePrepareResourcesResponse, error) {
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
	return &drapbv1.NodePrepareResourcesResponse{Claims: claims}, nil
}

func (s *draService) NodeUnprepareResources(ctx context.Context, req *drapbv1.NodeUnprepareResourcesRequest) (*drapbv1.NodeUnprepareResourcesResponse, error) {
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
	return &drapbv1.NodeUnprepareResourcesResponse{Claims: claims}, nil
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

// newRequestID names one kubelet call in the logs.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
