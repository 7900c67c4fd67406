package pluginmgr

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/dranode/dranode/pluginmgr/proto/dranode/plugin/v1"
)

// current returns the running instance or the error a call gets without one.
func (p *Plugin) current() (*instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return nil, fmt.Errorf("plugin %q: %w", p.cfg.Name, ErrClosed)
	case p.status.State == StateCrashLoop:
		return nil, fmt.Errorf("plugin %q: %w", p.cfg.Name, p.status.Err)
	case p.inst == nil:
		return nil, &UnavailableError{Plugin: p.cfg.Name, Cause: p.status.Err}
	}
	return p.inst, nil
}

func (p *Plugin) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, p.opts.CallTimeout)
}

// callError classifies a failed call: the caller's own deadline or
// cancellation stays matchable; a vanished process becomes retryable.
func (p *Plugin) callError(method string, ctx context.Context, inst *instance, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("plugin %q %s: %w", p.cfg.Name, method, ctxErr)
	}
	p.mu.Lock()
	replaced := p.inst != inst
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return fmt.Errorf("plugin %q %s: %w", p.cfg.Name, method, ErrClosed)
	}
	if status.Code(err) == codes.Unavailable || replaced || inst.client.Exited() {
		return &UnavailableError{Plugin: p.cfg.Name, Cause: fmt.Errorf("%s: %w", method, err)}
	}
	return fmt.Errorf("plugin %q %s: %w", p.cfg.Name, method, err)
}

// Prepare forwards a batch of claims to the plugin. It returns one result per
// claim, in the order of claims.
func (p *Plugin) Prepare(ctx context.Context, claims []Claim) ([]PrepareResult, error) {
	inst, err := p.current()
	if err != nil {
		return nil, err
	}
	wire, err := claimsToWire(claims)
	if err != nil {
		return nil, fmt.Errorf("plugin %q Prepare: %w", p.cfg.Name, err)
	}
	ctx, cancel := p.callContext(ctx)
	defer cancel()
	resp, err := inst.rpc.Prepare(ctx, &pb.PrepareRequest{Claims: wire})
	if err != nil {
		return nil, p.callError("Prepare", ctx, inst, err)
	}
	results, err := prepareResultsFromWire(claims, resp.GetClaims())
	if err != nil {
		return nil, fmt.Errorf("plugin %q Prepare: %w", p.cfg.Name, err)
	}
	return results, nil
}

// Unprepare forwards a batch of prepared claims to the plugin. It returns one
// result per claim, in the order of claims.
func (p *Plugin) Unprepare(ctx context.Context, claims []PreparedClaim) ([]UnprepareResult, error) {
	inst, err := p.current()
	if err != nil {
		return nil, err
	}
	wire, err := preparedClaimsToWire(claims)
	if err != nil {
		return nil, fmt.Errorf("plugin %q Unprepare: %w", p.cfg.Name, err)
	}
	ctx, cancel := p.callContext(ctx)
	defer cancel()
	resp, err := inst.rpc.Unprepare(ctx, &pb.UnprepareRequest{Claims: wire})
	if err != nil {
		return nil, p.callError("Unprepare", ctx, inst, err)
	}
	results, err := unprepareResultsFromWire(claims, resp.GetClaims())
	if err != nil {
		return nil, fmt.Errorf("plugin %q Unprepare: %w", p.cfg.Name, err)
	}
	return results, nil
}
