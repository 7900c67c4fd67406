package pluginmgr

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/dranode/dranode/inventory"
	pb "github.com/dranode/dranode/pluginmgr/proto/dranode/plugin/v1"
)

// Plugin is the host side of one running driver plugin: it owns the process,
// restarts it when it fails, and forwards calls to it.
type Plugin struct {
	cfg     PluginConfig
	opts    Options
	log     hclog.Logger
	sockDir string

	// ctx lives until Close (cancel), which abandons a restart in progress
	// and ends the streams the supervisor follows; done is closed when the
	// supervisor has returned.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	inst   *instance
	status Status
	info   Info
	// invWire is the latest inventory as the plugin sent it: its Kubernetes
	// protobuf encoding is a fraction of the decoded Devices, and callers
	// other than OnInventory ask for it rarely, so it is decoded on demand.
	invWire *pb.Inventory
	invSeq  uint64
	invWait chan struct{} // closed and replaced on every inventory
	closed  bool          // Close has begun

	closeOnce sync.Once
	closeErr  error // set once, inside closeOnce
}

// Name is the configured plugin name.
func (p *Plugin) Name() string { return p.cfg.Name }

// Info is what the plugin reported at its first start.
func (p *Plugin) Info() Info {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.info
}

// Status is the current supervision state.
func (p *Plugin) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// Inventory returns the latest inventory and its sequence number (0: none
// yet). Sequence numbers grow with every inventory, across restarts. Each
// call decodes a copy of its own, which the caller may keep or modify.
func (p *Plugin) Inventory() (inventory.Inventory, uint64) {
	p.mu.Lock()
	wire, seq := p.invWire, p.invSeq
	p.mu.Unlock()
	return decodeKept(wire), seq
}

// decodeKept decodes an inventory that already decoded once when it
// arrived (follow refuses one that does not), so it cannot fail.
func decodeKept(wire *pb.Inventory) inventory.Inventory {
	if wire == nil {
		return inventory.Inventory{}
	}
	inv, err := InventoryFromWire(wire)
	if err != nil {
		panic(fmt.Sprintf("pluginmgr: a kept inventory no longer decodes: %v", err))
	}
	return inv
}

// WaitInventory waits for an inventory with a sequence number above after
// and returns it with its sequence number. It fails when ctx ends, the
// plugin is closed, or it is crash looping (ErrCrashLoop).
func (p *Plugin) WaitInventory(ctx context.Context, after uint64) (inventory.Inventory, uint64, error) {
	for {
		p.mu.Lock()
		wire, seq, wait, closed, st := p.invWire, p.invSeq, p.invWait, p.closed, p.status
		p.mu.Unlock()
		if seq > after {
			return decodeKept(wire), seq, nil
		}
		if closed {
			return inventory.Inventory{}, 0, fmt.Errorf("plugin %q: %w", p.cfg.Name, ErrClosed)
		}
		if st.State == StateCrashLoop {
			return inventory.Inventory{}, 0, fmt.Errorf("plugin %q: %w", p.cfg.Name, st.Err)
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return inventory.Inventory{}, 0, fmt.Errorf("plugin %q: waiting for inventory: %w", p.cfg.Name, ctx.Err())
		}
	}
}

// Close stops supervision and the plugin process (asking it to exit, then
// killing it), and removes the plugin's socket directory. It returns when
// everything is gone. Close may be called more than once and from several
// goroutines: every call waits for the first to finish and returns its
// error.
func (p *Plugin) Close() error {
	p.closeOnce.Do(func() { p.closeErr = p.shutdown() })
	return p.closeErr
}

func (p *Plugin) shutdown() error {
	p.mu.Lock()
	p.closed = true
	wait := p.invWait
	p.invWait = make(chan struct{})
	p.mu.Unlock()
	close(wait)
	// The supervisor stops the process when its stream ends (or abandons a
	// restart in progress); killing it here as well would race two
	// shutdowns and turn a graceful exit into a kill.
	p.cancel()
	<-p.done
	st := p.Status()
	p.report(Status{State: StateStopped, Restarts: st.Restarts})
	return os.RemoveAll(p.sockDir)
}
