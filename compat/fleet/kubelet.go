package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Kubelet is the part of a kubelet a DRA driver talks to, and no more: it
// registers plugins from the registration sockets that appear in
// RegistryDir (pluginregistration/v1: GetInfo, NotifyRegistrationStatus)
// and calls the DRA service (dra/v1) of the most recently registered one,
// as the kubelet's DRA plugin manager does during a rolling update. It
// never talks to the API server, so every request in the audit log under
// a node's user is its driver's.
type Kubelet struct {
	RegistryDir string

	mu      sync.Mutex
	seen    map[string]string // registration socket → identity registered (socketID)
	plugins []*Plugin         // in registration order
}

// Plugin is one registered driver instance.
type Plugin struct {
	Driver   string
	Endpoint string
	Socket   string // its registration socket
	conn     *grpc.ClientConn
	client   drapb.DRAPluginClient
}

// ErrNotDRA is returned when a registration socket offers something else
// than a DRA plugin of a supported version.
var ErrNotDRA = errors.New("not a DRA plugin of version v1")

// RegisterNext waits for a registration socket that has not been
// registered yet (a new file, or one created again by a restarted driver),
// registers it and connects to its DRA endpoint. The directory is checked
// again every few milliseconds until then: the driver's socket appearing is
// the event waited for.
func (k *Kubelet) RegisterNext(ctx context.Context) (*Plugin, error) {
	for {
		sock, id, err := k.newSocket()
		if err != nil {
			return nil, err
		}
		var p *Plugin
		if sock != "" {
			p, err = k.register(ctx, sock)
			if status.Code(err) == codes.Unavailable {
				// The file exists from the driver's bind, before its listen
				// (connection refused), or is an old driver's left behind:
				// like the kubelet's plugin manager, try again.
				p, err = nil, nil
			}
			if err != nil {
				return nil, err
			}
		}
		if p != nil {
			k.mu.Lock()
			if k.seen == nil {
				k.seen = map[string]string{}
			}
			k.seen[sock] = id
			k.plugins = append(k.plugins, p)
			k.mu.Unlock()
			return p, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a registration socket in %s: %w", k.RegistryDir, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// socketID tells a socket file from the one a restarted driver creates at
// the same path: the inode alone may be reused at once, its change time
// with it hardly.
func socketID(st *syscall.Stat_t) string {
	return fmt.Sprintf("%d/%d.%09d", st.Ino, st.Ctim.Sec, st.Ctim.Nsec)
}

func (k *Kubelet) newSocket() (string, string, error) {
	entries, err := os.ReadDir(k.RegistryDir)
	if err != nil && !os.IsNotExist(err) {
		return "", "", fmt.Errorf("kubelet registry: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sock") {
			continue
		}
		path := filepath.Join(k.RegistryDir, e.Name())
		fi, err := os.Stat(path)
		if err != nil {
			continue // removed meanwhile
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || fi.Mode()&os.ModeSocket == 0 {
			continue
		}
		if id, seen := k.seen[path]; seen && id == socketID(st) {
			continue
		}
		return path, socketID(st), nil
	}
	return "", "", nil
}

func (k *Kubelet) register(ctx context.Context, sock string) (*Plugin, error) {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("registration socket %s: %w", sock, err)
	}
	defer conn.Close()
	reg := registerapi.NewRegistrationClient(conn)
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("GetInfo on %s: %w", sock, err)
	}
	ok := info.Type == registerapi.DRAPlugin
	supported := false
	for _, v := range info.SupportedVersions {
		if v == drapb.DRAPluginService {
			supported = true
		}
	}
	if !ok || !supported {
		_, _ = reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{Error: "unsupported plugin"})
		return nil, fmt.Errorf("%s: type %q, versions %v: %w", sock, info.Type, info.SupportedVersions, ErrNotDRA)
	}
	dra, err := grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("DRA endpoint %s: %w", info.Endpoint, err)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		dra.Close()
		return nil, fmt.Errorf("NotifyRegistrationStatus on %s: %w", sock, err)
	}
	return &Plugin{Driver: info.Name, Endpoint: info.Endpoint, Socket: sock, conn: dra, client: drapb.NewDRAPluginClient(dra)}, nil
}

// current is the most recently registered plugin whose registration
// socket is still there; a driver removes its socket when it stops, which
// is how the kubelet's plugin watcher notices it going.
func (k *Kubelet) current() (*Plugin, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := len(k.plugins) - 1; i >= 0; i-- {
		p := k.plugins[i]
		if _, err := os.Stat(p.Socket); err == nil {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no registered plugin in %s", k.RegistryDir)
}

// Claim names a claim for the DRA service.
type Claim struct{ Namespace, Name, UID string }

// Prepare calls NodePrepareResources for claims and fails on any claim's
// error.
func (k *Kubelet) Prepare(ctx context.Context, claims ...Claim) error {
	p, err := k.current()
	if err != nil {
		return err
	}
	req := &drapb.NodePrepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: c.UID})
	}
	resp, err := p.client.NodePrepareResources(ctx, req)
	if err != nil {
		return fmt.Errorf("NodePrepareResources on %s: %w", p.Endpoint, err)
	}
	for _, c := range claims {
		r := resp.Claims[c.UID]
		switch {
		case r == nil:
			return fmt.Errorf("NodePrepareResources on %s: no answer for claim %s/%s", p.Endpoint, c.Namespace, c.Name)
		case r.Error != "":
			return fmt.Errorf("NodePrepareResources on %s: claim %s/%s: %s", p.Endpoint, c.Namespace, c.Name, r.Error)
		case len(r.Devices) == 0:
			return fmt.Errorf("NodePrepareResources on %s: claim %s/%s: no devices", p.Endpoint, c.Namespace, c.Name)
		}
	}
	return nil
}

// Unprepare calls NodeUnprepareResources for claims and fails on any
// claim's error.
func (k *Kubelet) Unprepare(ctx context.Context, claims ...Claim) error {
	p, err := k.current()
	if err != nil {
		return err
	}
	req := &drapb.NodeUnprepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: c.UID})
	}
	resp, err := p.client.NodeUnprepareResources(ctx, req)
	if err != nil {
		return fmt.Errorf("NodeUnprepareResources on %s: %w", p.Endpoint, err)
	}
	for _, c := range claims {
		if r := resp.Claims[c.UID]; r == nil || r.Error != "" {
			return fmt.Errorf("NodeUnprepareResources on %s: claim %s/%s: %v", p.Endpoint, c.Namespace, c.Name, r)
		}
	}
	return nil
}

// Close drops the connections to every plugin.
func (k *Kubelet) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.plugins {
		p.conn.Close()
	}
	k.plugins = nil
}
