package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
)

// routeCall answers a kubelet call: here while this instance holds the
// record, else by forwarding it to the holder's DRA socket. A holder that
// is gone makes this instance take the record back and answer itself; a
// holder that is starting is retried until the call's deadline.
func routeCall[R any](ctx context.Context, a *Agent, d *driver,
	local func(context.Context) R,
	remote func(context.Context, drapbv1.DRAPluginClient) (R, error),
) (R, error) {
	var zero R
	var last error
	for wait := 20 * time.Millisecond; ; wait = min(wait*2, 500*time.Millisecond) {
		a.gate.mu.RLock()
		if a.gate.held {
			defer a.gate.mu.RUnlock()
			return local(ctx), nil
		}
		a.gate.mu.RUnlock()
		r, err := forwardCall(ctx, a, d, remote)
		if err == nil {
			return r, nil
		}
		if status.Code(err) != codes.Unavailable && !errors.Is(err, ErrNotHolder) {
			return zero, err
		}
		last = err
		a.upgrade.retries.WithLabelValues(d.name).Inc()
		if a.reclaim() {
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
		a.upgrade.forwarded.WithLabelValues(d.name, "error").Inc()
		if status.Code(err) == codes.Unavailable {
			a.forgetHolder(target)
		}
		return zero, err
	}
	a.upgrade.forwarded.WithLabelValues(d.name, "ok").Inc()
	return r, nil
}

// holder is the instance ID of the record's holder: the instance this one
// handed the record over to, or whoever answers the hand-over socket once
// that one is forgotten.
func (a *Agent) holder(ctx context.Context) (string, error) {
	a.handover.mu.Lock()
	target := a.handover.target
	a.handover.mu.Unlock()
	if target != "" {
		return target, nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	reply, err := a.askHolder(ctx, handoverRequest{Op: "who"})
	if err != nil {
		return "", fmt.Errorf("finding the instance holding the claim record: %w", err)
	}
	if reply.Instance == "" || reply.Instance == a.cfg.Kubelet.InstanceID {
		return "", fmt.Errorf("finding the instance holding the claim record: %w", ErrNotHolder)
	}
	a.handover.mu.Lock()
	a.handover.target = reply.Instance
	a.handover.mu.Unlock()
	return reply.Instance, nil
}

func (a *Agent) forgetHolder(target string) {
	a.handover.mu.Lock()
	defer a.handover.mu.Unlock()
	if a.handover.target == target {
		a.handover.target = ""
	}
}

// forwardConn is a client connection to a DRA socket, kept for the
// following calls. Its reconnect backoff is short: the instance behind it
// may be a few hundred milliseconds from serving.
func (a *Agent) forwardConn(path string) (*grpc.ClientConn, error) {
	a.handover.mu.Lock()
	defer a.handover.mu.Unlock()
	if c, ok := a.handover.conns[path]; ok {
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
	if a.handover.conns == nil {
		a.handover.conns = map[string]*grpc.ClientConn{}
	}
	a.handover.conns[path] = c
	return c, nil
}

// closeForwarding closes the forwarding connections (at Stop).
func (a *Agent) closeForwarding() {
	a.handover.mu.Lock()
	defer a.handover.mu.Unlock()
	for p, c := range a.handover.conns {
		c.Close()
		delete(a.handover.conns, p)
	}
}
