package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
)

// forwarder is the routing state of an instance that does not hold the
// record: which instance does, and a connection to each DRA socket it
// forwarded to. Its mutex is a leaf of the lock order (Agent).
type forwarder struct {
	mu     sync.Mutex
	target string // the holder's instance ID, "" until known
	conns  map[string]*grpc.ClientConn
}

func (f *forwarder) cachedHolder() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.target
}

// setHolder remembers the holder's instance ID ("" forgets it).
func (f *forwarder) setHolder(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.target = id
}

// routedService is the DRA service the kubelet talks to: the local service
// while this instance holds the claim record, else a forward to the
// instance that does (during a rolling upgrade).
type routedService struct {
	drapbv1.UnimplementedDRAPluginServer
	a     *Agent
	d     *driver
	local drapbv1.DRAPluginServer
}

func (r *routedService) NodePrepareResources(ctx context.Context, req *drapbv1.NodePrepareResourcesRequest) (*drapbv1.NodePrepareResourcesResponse, error) {
	return routeCall(ctx, r.a, r.d,
		func(ctx context.Context) (*drapbv1.NodePrepareResourcesResponse, error) {
			return r.local.NodePrepareResources(ctx, req)
		},
		func(ctx context.Context, c drapbv1.DRAPluginClient) (*drapbv1.NodePrepareResourcesResponse, error) {
			return c.NodePrepareResources(ctx, req)
		})
}

func (r *routedService) NodeUnprepareResources(ctx context.Context, req *drapbv1.NodeUnprepareResourcesRequest) (*drapbv1.NodeUnprepareResourcesResponse, error) {
	return routeCall(ctx, r.a, r.d,
		func(ctx context.Context) (*drapbv1.NodeUnprepareResourcesResponse, error) {
			return r.local.NodeUnprepareResources(ctx, req)
		},
		func(ctx context.Context, c drapbv1.DRAPluginClient) (*drapbv1.NodeUnprepareResourcesResponse, error) {
			return c.NodeUnprepareResources(ctx, req)
		})
}

// routeCall answers a kubelet call: here while this instance holds the
// record, else by forwarding it to the holder's DRA socket. A holder that
// is gone makes this instance take the record back and answer itself; a
// holder that is starting is retried until the call's deadline.
func routeCall[R any](ctx context.Context, a *Agent, d *driver,
	local func(context.Context) (R, error),
	remote func(context.Context, drapbv1.DRAPluginClient) (R, error),
) (R, error) {
	var zero R
	var last error
	for wait := 20 * time.Millisecond; ; wait = min(wait*2, 500*time.Millisecond) {
		if leave, held := a.record.Enter(); held {
			defer leave()
			return local(ctx)
		}
		r, err := forwardCall(ctx, a, d, remote)
		if err == nil {
			return r, nil
		}
		if status.Code(err) != codes.Unavailable && !errors.Is(err, ErrNotHolder) {
			return zero, err
		}
		last = err
		a.metrics.upgrade.retries.WithLabelValues(d.name).Inc()
		if a.record.Reclaim() {
			continue
		}
		select {
		case <-ctx.Done():
			return zero, status.Errorf(codes.Unavailable, "forwarding to the instance holding the claim record: %v", last)
		case <-time.After(wait):
		}
	}
}

// forwardCall sends a call to the instance holding the record, over its
// DRA socket, as the kubelet would.
func forwardCall[R any](ctx context.Context, a *Agent, d *driver, remote func(context.Context, drapbv1.DRAPluginClient) (R, error)) (R, error) {
	var zero R
	target, err := a.holder(ctx)
	if err != nil {
		return zero, status.Error(codes.Unavailable, err.Error())
	}
	conn, err := a.forwardConn(DRASocketFor(a.cfg.Kubelet.PluginsDir, d.name, target))
	if err != nil {
		return zero, status.Error(codes.Unavailable, err.Error())
	}
	r, err := remote(ctx, drapbv1.NewDRAPluginClient(conn))
	if err != nil {
		a.metrics.upgrade.forwarded.WithLabelValues(d.name, "error").Inc()
		if status.Code(err) == codes.Unavailable {
			a.forgetHolder(target)
		}
		return zero, err
	}
	a.metrics.upgrade.forwarded.WithLabelValues(d.name, "ok").Inc()
	return r, nil
}

// holder is the instance ID of the record's holder: the instance this one
// handed the record over to, or whoever answers the hand-over socket once
// that one is forgotten.
func (a *Agent) holder(ctx context.Context) (string, error) {
	if target := a.forward.cachedHolder(); target != "" {
		return target, nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	target, err := a.record.Who(ctx)
	if err != nil {
		return "", fmt.Errorf("finding the instance holding the claim record: %w", err)
	}
	a.forward.setHolder(target)
	return target, nil
}

func (a *Agent) forgetHolder(target string) {
	a.forward.mu.Lock()
	defer a.forward.mu.Unlock()
	if a.forward.target == target {
		a.forward.target = ""
	}
}

// forwardConn is a client connection to a DRA socket, kept for the
// following calls. Its reconnect backoff is short: the instance behind it
// may be a few hundred milliseconds from serving.
func (a *Agent) forwardConn(path string) (*grpc.ClientConn, error) {
	a.forward.mu.Lock()
	defer a.forward.mu.Unlock()
	if c, ok := a.forward.conns[path]; ok {
		return c, nil
	}
	c, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, MaxDelay: 250 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return nil, fmt.Errorf("forwarding to %s: %w", path, err)
	}
	if a.forward.conns == nil {
		a.forward.conns = map[string]*grpc.ClientConn{}
	}
	a.forward.conns[path] = c
	return c, nil
}

// closeForwarding closes the forwarding connections (at Stop).
func (a *Agent) closeForwarding() {
	a.forward.mu.Lock()
	defer a.forward.mu.Unlock()
	for p, c := range a.forward.conns {
		c.Close()
		delete(a.forward.conns, p)
	}
}
