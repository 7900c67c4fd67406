package record

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/dranode/dranode/checkpoint"
)

// The hand-over of the claim record between two instances of the agent on
// one node (a rolling upgrade with maxSurge; DESIGN.md, "Seamless
// upgrades", has the design and its failure cases). The record's flock
// decides who holds it; the files below, in StateDir, only help the
// instances find each other.
const (
	// handoverSocket is served by the instance holding the record: "who"
	// names it, "release" makes it hand the record over.
	handoverSocket = "handover.sock"
	// startLock is held by an instance while it takes the record over
	// and starts, so that an instance that handed the record over does
	// not take it back in that window; the kernel drops it if the
	// starting instance dies.
	startLock = "handover.lock"
)

type request struct {
	Op   string `json:"op"`             // "who" or "release"
	From string `json:"from,omitempty"` // the asking instance
}

type reply struct {
	Instance string `json:"instance,omitempty"`
	Released bool   `json:"released,omitempty"`
	Error    string `json:"error,omitempty"`
}

// handover is the hand-over state of one instance.
type handover struct {
	mu      sync.Mutex // a leaf
	lis     net.Listener
	lisInfo os.FileInfo      // the socket file this instance created
	start   *checkpoint.Lock // startLock while starting; Open and EndStart only
}

func (h *Holder) handoverPath() string { return filepath.Join(h.cfg.StateDir, handoverSocket) }

// Who asks the hand-over socket which instance holds the record. An answer
// naming no instance, or this one, is ErrNotHolder.
func (h *Holder) Who(ctx context.Context) (string, error) {
	r, err := h.ask(ctx, request{Op: "who"})
	if err != nil {
		return "", err
	}
	if r.Instance == "" || r.Instance == h.cfg.InstanceID {
		return "", ErrNotHolder
	}
	return r.Instance, nil
}

// ask sends one request to the instance serving the hand-over socket.
func (h *Holder) ask(ctx context.Context, req request) (reply, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", h.handoverPath())
	if err != nil {
		return reply{}, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return reply{}, err
	}
	var r reply
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&r); err != nil {
		return reply{}, fmt.Errorf("hand-over reply: %w", err)
	}
	return r, nil
}

// ServeHandover serves the hand-over socket; only the holder does, and
// only with an instance ID.
func (h *Holder) ServeHandover() error {
	if h.cfg.InstanceID == "" {
		return nil
	}
	lis, err := h.cfg.Listen(h.handoverPath())
	if err != nil {
		return fmt.Errorf("hand-over socket: %w", err)
	}
	fi, err := os.Lstat(h.handoverPath())
	if err != nil {
		lis.Close()
		return fmt.Errorf("hand-over socket: %w", err)
	}
	h.handover.mu.Lock()
	h.handover.lis, h.handover.lisInfo = lis, fi
	h.handover.mu.Unlock()
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go h.handle(conn)
		}
	}()
	return nil
}

// CloseHandover stops serving the hand-over socket. The file is removed
// only while it is still the one this instance created: the next holder
// has put its own in place.
func (h *Holder) CloseHandover() {
	h.handover.mu.Lock()
	lis, fi := h.handover.lis, h.handover.lisInfo
	h.handover.lis, h.handover.lisInfo = nil, nil
	h.handover.mu.Unlock()
	if lis == nil {
		return
	}
	lis.Close()
	if now, err := os.Lstat(h.handoverPath()); err == nil && os.SameFile(now, fi) {
		_ = os.Remove(h.handoverPath())
	}
}

func (h *Holder) handle(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(h.cfg.HandoverTimeout))
	var req request
	r := reply{Instance: h.cfg.InstanceID}
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&req); err != nil {
		r.Error = "bad request: " + err.Error()
	} else {
		switch req.Op {
		case "who":
		case "release":
			if req.From == h.cfg.InstanceID {
				r.Error = "asked to hand the record over to itself"
				break
			}
			if err := h.release(req.From); err != nil {
				r.Error = err.Error()
			} else {
				r.Released = true
			}
		default:
			r.Error = fmt.Sprintf("unknown operation %q", req.Op)
		}
	}
	_ = json.NewEncoder(conn).Encode(r)
}
