package agent

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
// one node (a rolling upgrade with maxSurge; DESIGN.md, "Seamless upgrades", has the design and
// its failure cases). The record's flock decides who holds it; the files
// below, in stateDir, only help the instances find each other.
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

// unregisterGrace is how long an instance with an instance ID keeps
// serving its DRA socket after removing its registration socket at Stop:
// twice the period of the kubelet plugin watcher's reconciler.
const unregisterGrace = 2 * time.Second

type handoverRequest struct {
	Op   string `json:"op"`             // "who" or "release"
	From string `json:"from,omitempty"` // the asking instance
}

type handoverReply struct {
	Instance string `json:"instance,omitempty"`
	Released bool   `json:"released,omitempty"`
	Error    string `json:"error,omitempty"`
}

// handover is the hand-over state of one instance.
type handover struct {
	mu      sync.Mutex
	lis     net.Listener
	lisInfo os.FileInfo      // the socket file this instance created
	start   *checkpoint.Lock // startLock while starting
}

func (a *Agent) handoverPath() string { return filepath.Join(a.cfg.StateDir, handoverSocket) }

// askHolder sends one request to the instance serving the hand-over socket.
func (a *Agent) askHolder(ctx context.Context, req handoverRequest) (handoverReply, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", a.handoverPath())
	if err != nil {
		return handoverReply{}, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return handoverReply{}, err
	}
	var reply handoverReply
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&reply); err != nil {
		return handoverReply{}, fmt.Errorf("hand-over reply: %w", err)
	}
	return reply, nil
}

// serveHandover serves the hand-over socket; only the holder does.
func (a *Agent) serveHandover() error {
	if a.cfg.Kubelet.InstanceID == "" {
		return nil
	}
	lis, err := listenUnix(a.handoverPath())
	if err != nil {
		return fmt.Errorf("hand-over socket: %w", err)
	}
	fi, err := os.Lstat(a.handoverPath())
	if err != nil {
		lis.Close()
		return fmt.Errorf("hand-over socket: %w", err)
	}
	a.record.handover.mu.Lock()
	a.record.handover.lis, a.record.handover.lisInfo = lis, fi
	a.record.handover.mu.Unlock()
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go a.handleHandover(conn)
		}
	}()
	return nil
}

// closeHandover stops serving the hand-over socket. The file is removed
// only while it is still the one this instance created: the next holder
// has put its own in place.
func (a *Agent) closeHandover() {
	a.record.handover.mu.Lock()
	lis, fi := a.record.handover.lis, a.record.handover.lisInfo
	a.record.handover.lis, a.record.handover.lisInfo = nil, nil
	a.record.handover.mu.Unlock()
	if lis == nil {
		return
	}
	lis.Close()
	if now, err := os.Lstat(a.handoverPath()); err == nil && os.SameFile(now, fi) {
		_ = os.Remove(a.handoverPath())
	}
}

func (a *Agent) handleHandover(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(a.cfg.Kubelet.HandoverTimeout))
	var req handoverRequest
	reply := handoverReply{Instance: a.cfg.Kubelet.InstanceID}
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&req); err != nil {
		reply.Error = "bad request: " + err.Error()
	} else {
		switch req.Op {
		case "who":
		case "release":
			if req.From == a.cfg.Kubelet.InstanceID {
				reply.Error = "asked to hand the record over to itself"
				break
			}
			if err := a.release(req.From); err != nil {
				reply.Error = err.Error()
			} else {
				reply.Released = true
			}
		default:
			reply.Error = fmt.Sprintf("unknown operation %q", req.Op)
		}
	}
	_ = json.NewEncoder(conn).Encode(reply)
}
