package record

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/dranode/dranode/checkpoint"
	"github.com/dranode/dranode/claimcache"
)

// ErrNotHolder is the hand-over's answer of an instance that does not hold
// the claim record (any more).
var ErrNotHolder = errors.New("this agent instance does not hold the claim record")

// Agent is what the holder needs of the agent whose record it holds. The
// hand-over and the reclaim call it under the gate's write lock: it may
// take the locks after the gate in the lock order, never the gate itself.
type Agent interface {
	// Stopping returns a non-nil error (the agent's ErrStopping) once the
	// agent stops: the record is then neither handed over nor taken back.
	Stopping() error
	// StopPublishing stops the slice publishers without touching the
	// slices, as the record is handed over: the next holder adopts them.
	StopPublishing()
	// ForwardTo makes the agent forward the kubelet's calls to instance
	// to; "" makes it answer them itself again.
	ForwardTo(instance string)
	// Reclaimed is called once the record was taken back: the agent
	// settles it and serves again (finishes interrupted claims, starts
	// its publishers, removes the dead instance's sockets).
	Reclaimed()
}

// Config is where the record is and how the instances find each other.
type Config struct {
	// Dir is the claim record's directory.
	Dir string
	// StateDir holds the hand-over's lock and socket.
	StateDir string
	// InstanceID names this instance; "" for the only instance on the
	// node, which neither hands over nor asks.
	InstanceID string
	// HandoverTimeout bounds how long Open asks a holder for the record,
	// and one hand-over connection.
	HandoverTimeout time.Duration
	// Listen listens on a Unix socket path (the agent's, with its path
	// length and stale-socket checks).
	Listen func(path string) (net.Listener, error)
	// Log receives the hand-over's messages.
	Log logr.Logger
}

// Holder is the claim record as this instance holds it. cache and report
// change only under the gate's write lock (the hand-over and the reclaim
// replace them); record operations read them under its read lock.
type Holder struct {
	cfg   Config
	agent Agent

	gate     sync.RWMutex
	held     bool // under gate
	cache    *claimcache.Cache
	report   *claimcache.RestoreReport
	released time.Time // when this instance handed the record over; under gate

	handover  handover      // handover.go
	closed    chan struct{} // closed by Close: ends watchHolder
	closeOnce sync.Once
}

// New returns a holder that holds nothing until Open.
func New(cfg Config, agent Agent) *Holder {
	return &Holder{cfg: cfg, agent: agent, closed: make(chan struct{})}
}

// Cache is the claim record. Call it inside Enter, or under the write
// lock's callbacks, or when this instance is known to hold the record
// (at start, in tests): a hand-over replaces it.
func (h *Holder) Cache() *claimcache.Cache { return h.cache }

// Report is what opening the record restored (the last Open or reclaim).
func (h *Holder) Report() *claimcache.RestoreReport { return h.report }

// Held reports whether this instance holds the claim record.
func (h *Holder) Held() bool {
	h.gate.RLock()
	defer h.gate.RUnlock()
	return h.held
}

// Enter admits one record operation (a kubelet call answered here, a
// sweep): while held is true, the gate's read side is held until leave is
// called, so that a hand-over waits for the operation. When this instance
// does not hold the record, leave is nil and nothing is held.
func (h *Holder) Enter() (leave func(), held bool) {
	h.gate.RLock()
	if !h.held {
		h.gate.RUnlock()
		return nil, false
	}
	return h.gate.RUnlock, true
}

// Claims is the number of claims in the record as this instance last held
// it; opened is false before the record was first opened.
func (h *Holder) Claims() (n int, opened bool) {
	h.gate.RLock()
	defer h.gate.RUnlock()
	if h.cache == nil {
		return 0, false
	}
	return h.cache.Len(), true
}

func (h *Holder) startLockPath() string { return filepath.Join(h.cfg.StateDir, startLock) }

func (h *Holder) open(bootID string) (*claimcache.Cache, *claimcache.RestoreReport, error) {
	return claimcache.Open(h.cfg.Dir, bootID,
		claimcache.WithJournalOptions(checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside)))
}

// Open opens the claim record. With an instance ID, a record held by
// another instance is asked for over the hand-over socket, for at most
// HandoverTimeout; the start lock is kept until EndStart.
func (h *Holder) Open(ctx context.Context, bootID string) error {
	if h.cfg.InstanceID == "" {
		cache, report, err := h.open(bootID)
		if err != nil {
			return err
		}
		h.gate.Lock()
		h.cache, h.report, h.held = cache, report, true
		h.gate.Unlock()
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.HandoverTimeout)
	defer cancel()
	begin := time.Now()
	var last error
	asked := false
	for wait := 20 * time.Millisecond; ; wait = min(wait*2, 500*time.Millisecond) {
		if h.handover.start == nil {
			l, err := checkpoint.TryLock(h.startLockPath())
			switch {
			case err == nil:
				h.handover.start = l
			case !errors.Is(err, checkpoint.ErrLocked):
				return err
			default:
				last = fmt.Errorf("another instance is starting (%s is locked)", h.startLockPath())
			}
		}
		if h.handover.start != nil {
			cache, report, err := h.open(bootID)
			if err == nil {
				h.gate.Lock()
				h.cache, h.report, h.held = cache, report, true
				h.gate.Unlock()
				if asked {
					h.cfg.Log.Info("Claim record handed over", "took", time.Since(begin))
				}
				return nil
			}
			if !errors.Is(err, checkpoint.ErrLocked) {
				return err
			}
			reply, err := h.ask(ctx, request{Op: "release", From: h.cfg.InstanceID})
			switch {
			case err != nil:
				last = fmt.Errorf("the claim record is locked and its holder does not answer the hand-over: %w", err)
			case reply.Error != "":
				last = fmt.Errorf("the claim record's holder %s refused the hand-over: %s", reply.Instance, reply.Error)
			case reply.Released:
				asked = true
				h.cfg.Log.Info("The previous instance released the claim record", "instance", reply.Instance)
				continue
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("opening the claim record: no hand-over within kubelet.handoverTimeout (%s): %w", h.cfg.HandoverTimeout, last)
		case <-time.After(wait):
		}
	}
}

// EndStart releases the start lock: this instance serves now, and another
// may take the record from it.
func (h *Holder) EndStart() {
	if h.handover.start != nil {
		_ = h.handover.start.Unlock()
		h.handover.start = nil
	}
}

// release hands the record over: it waits for the record operations in
// flight, holds back new ones (they forward once it is done), stops the
// publishers without touching the slices, and closes the record.
func (h *Holder) release(to string) error {
	h.gate.Lock()
	defer h.gate.Unlock()
	if !h.held {
		return ErrNotHolder
	}
	if err := h.agent.Stopping(); err != nil {
		return err
	}
	start := time.Now()
	h.agent.StopPublishing()
	err := h.cache.Close()
	h.held = false
	h.released = time.Now()
	h.agent.ForwardTo(to)
	h.CloseHandover()
	h.cfg.Log.Info("Claim record handed over; forwarding the kubelet's calls from now on", "to", to, "took", time.Since(start))
	go h.watchHolder()
	return err
}

// watchHolder takes the record back when its holder died without a
// successor (a new instance that crashed while starting), even when no
// kubelet call comes to trigger the fallback.
func (h *Holder) watchHolder() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-h.closed:
			return
		case <-t.C:
		}
		if h.agent.Stopping() != nil || h.Reclaim() {
			return
		}
	}
}

// Reclaim takes the record back if no other instance holds it or is
// starting; it reports whether this instance holds the record afterwards.
func (h *Holder) Reclaim() bool {
	h.gate.Lock()
	defer h.gate.Unlock()
	if h.held {
		return true
	}
	if h.agent.Stopping() != nil {
		return false
	}
	lock, err := checkpoint.TryLock(h.startLockPath())
	if err != nil {
		return false // another instance is starting: it will serve
	}
	defer lock.Unlock()
	cache, report, err := h.open(h.cache.BootID())
	if err != nil {
		if !errors.Is(err, checkpoint.ErrLocked) {
			h.cfg.Log.Error(err, "Taking the claim record back")
		}
		return false
	}
	h.cache, h.report, h.held = cache, report, true
	h.agent.ForwardTo("")
	h.cfg.Log.Info("The instance holding the claim record is gone: took the record back and serve the kubelet's calls myself",
		"claims", cache.Len(), "interrupted", len(report.Interrupted), "handedOverFor", time.Since(h.released))
	h.agent.Reclaimed()
	if err := h.ServeHandover(); err != nil {
		h.cfg.Log.Error(err, "Serving the hand-over socket again; the next instance will wait for kubelet.handoverTimeout")
	}
	return true
}

// Close closes the record at the agent's Stop, and ends the watch for a
// reclaim.
func (h *Holder) Close() error {
	h.closeOnce.Do(func() { close(h.closed) })
	h.gate.Lock()
	defer h.gate.Unlock()
	h.held = false
	if h.cache == nil {
		return nil
	}
	return h.cache.Close()
}
