package pluginmgr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/dranode/dranode/pluginmgr/proto/dranode/plugin/v1"
)

// State is the supervision state of a plugin.
type State string

const (
	StateRunning    State = "Running"
	StateRestarting State = "Restarting"
	StateCrashLoop  State = "CrashLoop"
	StateStopped    State = "Stopped"
)

// Status is a snapshot of a plugin's supervision.
type Status struct {
	Plugin string
	State  State
	// PID of the running process; 0 when none runs.
	PID int
	// Restarts counts successful restarts after the first start.
	Restarts int
	// Failures counts consecutive failures (process exits and failed starts).
	Failures int
	// Delay is, in StateRestarting, the wait before the next attempt.
	Delay time.Duration
	// Err is why the plugin is not running.
	Err error
}

func (p *Plugin) report(st Status) {
	st.Plugin = p.cfg.Name
	p.mu.Lock()
	p.status = st
	if st.State == StateCrashLoop {
		// Wake WaitInventory: no inventory is coming any more.
		close(p.invWait)
		p.invWait = make(chan struct{})
	}
	p.mu.Unlock()
	if p.opts.OnStatus != nil {
		p.opts.OnStatus(st)
	}
}

func (p *Plugin) up(inst *instance, restarted bool) {
	p.mu.Lock()
	p.inst = inst
	st := p.status
	p.mu.Unlock()
	if restarted {
		st.Restarts++
	}
	p.report(Status{State: StateRunning, PID: inst.pid, Restarts: st.Restarts, Failures: st.Failures})
	p.log.Info("plugin running", "pid", inst.pid, "driver", inst.info.DriverName, "version", inst.info.DriverVersion)
}

// supervise follows the running instance and restarts it when it fails.
func (p *Plugin) supervise(inst *instance) {
	defer close(p.done)
	failures := failureWindow{window: p.opts.CrashLoop.Window}
	consecutive := 0
	for {
		started := time.Now()
		err := p.follow(inst)
		p.mu.Lock()
		p.inst = nil
		restarts := p.status.Restarts
		p.mu.Unlock()
		inst.kill()
		if p.ctx.Err() != nil {
			return
		}
		p.log.Warn("plugin failed", "error", err)
		p.clearSockets()
		if time.Since(started) >= p.opts.Backoff.ResetAfter {
			consecutive = 0
		}
		for {
			consecutive++
			if n := failures.add(time.Now()); n >= p.opts.CrashLoop.MaxFailures {
				p.log.Error("plugin is crash looping; not restarting it", "failures", n, "window", p.opts.CrashLoop.Window, "error", err)
				p.report(Status{State: StateCrashLoop, Restarts: restarts, Failures: consecutive,
					Err: fmt.Errorf("%w: %d failures within %s, last: %w", ErrCrashLoop, n, p.opts.CrashLoop.Window, err)})
				return
			}
			delay := p.opts.Backoff.delay(consecutive)
			p.report(Status{State: StateRestarting, Restarts: restarts, Failures: consecutive, Delay: delay, Err: err})
			timer := time.NewTimer(delay)
			select {
			case <-timer.C:
			case <-p.ctx.Done():
				timer.Stop()
				return
			}
			// Close cancels p.ctx, which abandons a restart in progress.
			inst, err = p.start(p.ctx)
			if err == nil {
				p.up(inst, true)
				break
			}
			if p.ctx.Err() != nil {
				return
			}
			p.log.Warn("plugin restart failed", "error", err)
		}
	}
}

// clearSockets removes what a killed plugin left in its socket directory;
// no instance runs while it is called.
func (p *Plugin) clearSockets() {
	entries, err := os.ReadDir(p.sockDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(p.sockDir, e.Name()))
	}
}

// follow consumes the instance's device (and health) streams until the
// stream breaks or the host closes.
func (p *Plugin) follow(inst *instance) error {
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	if inst.info.Health {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.followHealth(ctx, inst)
		}()
	}
	stream, err := inst.rpc.WatchDevices(ctx, &pb.WatchDevicesRequest{})
	if err != nil {
		return fmt.Errorf("WatchDevices: %w", err)
	}
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			return errors.New("plugin ended its device stream")
		}
		if err != nil {
			return fmt.Errorf("device stream: %w", err)
		}
		inv, err := InventoryFromWire(msg)
		if err != nil {
			return fmt.Errorf("device stream: %w", err)
		}
		p.mu.Lock()
		p.invWire = msg
		p.invSeq++
		close(p.invWait)
		p.invWait = make(chan struct{})
		p.mu.Unlock()
		if p.opts.OnInventory != nil {
			p.opts.OnInventory(p.cfg.Name, inv)
		}
	}
}

func (p *Plugin) followHealth(ctx context.Context, inst *instance) {
	stream, err := inst.rpc.WatchHealth(ctx, &pb.WatchHealthRequest{})
	if err != nil {
		return
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil && status.Code(err) != codes.Unimplemented {
				p.log.Warn("health stream ended", "error", err)
			}
			return
		}
		if p.opts.OnHealth != nil {
			p.opts.OnHealth(p.cfg.Name, healthFromWire(msg))
		}
	}
}
