package agent

import (
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"

	"github.com/dranode/dranode/pluginmgr"
)

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

// healthResend is how often the stream repeats an unchanged snapshot. The
// kubelet stamps each device's health with the time it received it and
// shows Unknown in the pod's status once that is 30 seconds old (its
// healthTimeout, v1.34.4; DefaultHealthTimeout, and the per-device
// health_check_timeout_seconds the plugin may send, from 1.35): a device
// reported once and never again reads Unhealthy for half a minute, then
// Unknown. Every 10 seconds leaves two reports' margin.
const healthResend = 10 * time.Second

type healthService struct {
	drahealthv1.UnimplementedDRAResourceHealthServer
	d *driver
	// resend overrides healthResend (tests).
	resend time.Duration
}

func (s *healthService) NodeWatchResources(_ *drahealthv1.NodeWatchResourcesRequest, stream grpc.ServerStreamingServer[drahealthv1.NodeWatchResourcesResponse]) error {
	every := s.resend
	if every == 0 {
		every = healthResend
	}
	resend := time.NewTicker(every)
	defer resend.Stop()
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
			resend.Reset(every)
		case <-resend.C:
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
