package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dranode/dranode/checkpoint"
	"github.com/dranode/dranode/claimcache"
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

// ErrNotHolder is the hand-over's answer of an instance that does not hold
// the claim record (any more).
var ErrNotHolder = errors.New("this agent instance does not hold the claim record")

// RegistrationSocketFor is the registration socket of one instance of the
// driver: RegistrationSocket without an instance ID,
// "<driver>-<instanceID>-reg.sock" with one (the upstream kubeletplugin
// helper's RollingUpdate name).
func RegistrationSocketFor(registryDir, driverName, instanceID string) string {
	if instanceID == "" {
		return RegistrationSocket(registryDir, driverName)
	}
	return filepath.Join(registryDir, driverName+"-"+instanceID+"-reg.sock")
}

// DRASocketFor is the DRA socket of one instance of the driver: DRASocket
// without an instance ID, "<driver>/dra-<instanceID>.sock" with one.
func DRASocketFor(pluginsDir, driverName, instanceID string) string {
	if instanceID == "" {
		return DRASocket(pluginsDir, driverName)
	}
	return filepath.Join(pluginsDir, driverName, "dra-"+instanceID+".sock")
}

// recordGate says whether this instance holds the claim record. Record
// operations run under its read lock; handing the record over takes the
// write lock, so it waits for those in flight and holds back new ones,
// which then find the record gone and forward.
type recordGate struct {
	mu   sync.RWMutex
	held bool
}

// holdsRecord reports whether this instance holds the claim record.
func (a *Agent) holdsRecord() bool {
	a.gate.mu.RLock()
	defer a.gate.mu.RUnlock()
	return a.gate.held
}

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
	mu       sync.Mutex
	lis      net.Listener
	lisInfo  os.FileInfo      // the socket file this instance created
	start    *checkpoint.Lock // startLock while starting
	target   string           // cached holder instance ID for forwarding
	conns    map[string]*grpc.ClientConn
	released time.Time // when this instance handed the record over
}

func (a *Agent) handoverPath() string { return filepath.Join(a.cfg.StateDir, handoverSocket) }
func (a *Agent) startLockPath() string {
	return filepath.Join(a.cfg.StateDir, startLock)
}
func (a *Agent) recordDir() string { return filepath.Join(a.cfg.StateDir, claimRecordDir) }

// openRecord opens the claim record. With an instance ID, a record held by
// another instance is asked for over the hand-over socket, for at most
// kubelet.handoverTimeout; the start lock is kept until Start is done
// (endStart).
func (a *Agent) openRecord(ctx context.Context, bootID string) error {
	open := func() error {
		var err error
		a.cache, a.report, err = claimcache.Open(a.recordDir(), bootID,
			claimcache.WithJournalOptions(checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside)))
		return err
	}
	if a.cfg.Kubelet.InstanceID == "" {
		if err := open(); err != nil {
			return err
		}
		a.gate.held = true
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Kubelet.HandoverTimeout)
	defer cancel()
	begin := time.Now()
	var last error
	asked := false
	for wait := 20 * time.Millisecond; ; wait = min(wait*2, 500*time.Millisecond) {
		if a.handover.start == nil {
			l, err := checkpoint.TryLock(a.startLockPath())
			switch {
			case err == nil:
				a.handover.start = l
			case !errors.Is(err, checkpoint.ErrLocked):
				return err
			default:
				last = fmt.Errorf("another instance is starting (%s is locked)", a.startLockPath())
			}
		}
		if a.handover.start != nil {
			err := open()
			if err == nil {
				a.gate.held = true
				if asked {
					a.log.Info("Claim record handed over", "took", time.Since(begin))
				}
				return nil
			}
			if !errors.Is(err, checkpoint.ErrLocked) {
				return err
			}
			reply, err := a.askHolder(ctx, handoverRequest{Op: "release", From: a.cfg.Kubelet.InstanceID})
			switch {
			case err != nil:
				last = fmt.Errorf("the claim record is locked and its holder does not answer the hand-over: %w", err)
			case reply.Error != "":
				last = fmt.Errorf("the claim record's holder %s refused the hand-over: %s", reply.Instance, reply.Error)
			case reply.Released:
				asked = true
				a.log.Info("The previous instance released the claim record", "instance", reply.Instance)
				continue
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("opening the claim record: no hand-over within kubelet.handoverTimeout (%s): %w", a.cfg.Kubelet.HandoverTimeout, last)
		case <-time.After(wait):
		}
	}
}

// endStart releases the start lock: this instance serves now.
func (a *Agent) endStart() {
	if a.handover.start != nil {
		_ = a.handover.start.Unlock()
		a.handover.start = nil
	}
}

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
	a.handover.mu.Lock()
	a.handover.lis, a.handover.lisInfo = lis, fi
	a.handover.mu.Unlock()
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
	a.handover.mu.Lock()
	lis, fi := a.handover.lis, a.handover.lisInfo
	a.handover.lis, a.handover.lisInfo = nil, nil
	a.handover.mu.Unlock()
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

// release hands the record over: it waits for the record operations in
// flight, holds back new ones (they forward once it is done), stops the
// slice publishers without touching the slices, and closes the record.
func (a *Agent) release(to string) error {
	a.gate.mu.Lock()
	defer a.gate.mu.Unlock()
	if !a.gate.held {
		return ErrNotHolder
	}
	if a.stopping.Load() {
		return ErrStopping
	}
	start := time.Now()
	a.mu.Lock()
	var pubs []interface{ Stop() }
	for _, d := range a.drivers {
		if d.publisher != nil {
			pubs = append(pubs, d.publisher)
			d.publisher = nil // inventory changes wait in d.taints for a reclaim
		}
	}
	a.mu.Unlock()
	for _, p := range pubs {
		p.Stop()
	}
	err := a.cache.Close()
	a.gate.held = false
	a.handover.mu.Lock()
	a.handover.target = to
	a.handover.released = time.Now()
	a.handover.mu.Unlock()
	a.closeHandover()
	a.log.Info("Claim record handed over; forwarding the kubelet's calls from now on", "to", to, "took", time.Since(start))
	go a.watchHolder()
	return err
}

// watchHolder takes the record back when its holder died without a
// successor (a new instance that crashed while starting), even when no
// kubelet call comes to trigger the fallback.
func (a *Agent) watchHolder() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
		if a.stopping.Load() || a.reclaim() {
			return
		}
	}
}

// reclaim takes the record back if no other instance holds it or is
// starting; it reports whether this instance holds the record afterwards.
func (a *Agent) reclaim() bool {
	a.gate.mu.Lock()
	defer a.gate.mu.Unlock()
	if a.gate.held {
		return true
	}
	if a.stopping.Load() {
		return false
	}
	lock, err := checkpoint.TryLock(a.startLockPath())
	if err != nil {
		return false // another instance is starting: it will serve
	}
	defer lock.Unlock()
	cache, report, err := claimcache.Open(a.recordDir(), a.cache.BootID(),
		claimcache.WithJournalOptions(checkpoint.WithCorruptPolicy(checkpoint.MoveCorruptAside)))
	if err != nil {
		if !errors.Is(err, checkpoint.ErrLocked) {
			a.log.Error(err, "Taking the claim record back")
		}
		return false
	}
	a.cache, a.report = cache, report
	a.gate.held = true
	a.upgrade.reclaims.Inc()
	a.handover.mu.Lock()
	since := time.Since(a.handover.released)
	a.handover.target = ""
	a.handover.mu.Unlock()
	a.log.Info("The instance holding the claim record is gone: took the record back and serve the kubelet's calls myself",
		"claims", cache.Len(), "interrupted", len(report.Interrupted), "handedOverFor", since)
	a.logDamage()
	a.finishInterrupted(a.ctx)
	a.reconcileUncertain(a.ctx)
	for _, d := range a.sortedDrivers() {
		if err := a.startPublisher(a.ctx, d); err != nil {
			a.log.Error(err, "Restarting the ResourceSlice publisher", "driver", d.name)
		}
	}
	if err := a.serveHandover(); err != nil {
		a.log.Error(err, "Serving the hand-over socket again; the next instance will wait for kubelet.handoverTimeout")
	}
	return true
}

// startPublisher starts the driver's publisher and publishes its current
// inventory; the publisher adopts the slices already stored, so an
// unchanged inventory writes nothing.
func (a *Agent) startPublisher(ctx context.Context, d *driver) error {
	if a.standalone {
		return nil
	}
	pub, err := a.newPublisher(d)
	if err != nil {
		return err
	}
	if err := pub.Start(ctx); err != nil {
		return fmt.Errorf("driver %s: starting the ResourceSlice publisher: %w", d.name, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	d.publisher = pub
	if d.taints.haveOwn && !d.taints.waiting {
		a.publishLocked(d)
	}
	return nil
}

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

// removeStaleSockets removes the sockets of other instances of the driver
// that nothing listens on any more (an instance killed before it could
// clean up): the kubelet then forgets them. A socket that accepts, or that
// cannot be probed, stays.
func (a *Agent) removeStaleSockets(d *driver) {
	own := map[string]bool{d.regPath: true, d.draPath: true}
	var candidates []string
	for _, pattern := range []string{
		filepath.Join(a.cfg.Kubelet.RegistryDir, d.name+"-*reg.sock"),
		filepath.Join(a.cfg.Kubelet.PluginsDir, d.name, "dra*.sock"),
	} {
		m, _ := filepath.Glob(pattern)
		candidates = append(candidates, m...)
	}
	for _, path := range candidates {
		if own[path] || !ownedName(filepath.Base(path), d.name) {
			continue
		}
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			conn.Close()
			continue
		}
		if refused(err) {
			if err := os.Remove(path); err == nil {
				a.log.Info("Removed the socket of an instance that is gone", "driver", d.name, "socket", path)
			}
		}
	}
}

// ownedName reports whether a socket file name is one of the names this
// driver's instances use, and not another driver's whose name starts with
// this one's.
func ownedName(base, driver string) bool {
	switch {
	case base == driver+"-reg.sock", base == "dra.sock":
		return true
	case strings.HasPrefix(base, "dra-") && strings.HasSuffix(base, ".sock"):
		return validInstanceID(strings.TrimSuffix(strings.TrimPrefix(base, "dra-"), ".sock"))
	case strings.HasPrefix(base, driver+"-") && strings.HasSuffix(base, "-reg.sock"):
		// "<driver>-<id>-reg.sock": a pod UID is 36 characters with 4
		// dashes; any other ID with dashes might be another driver's name.
		id := strings.TrimSuffix(strings.TrimPrefix(base, driver+"-"), "-reg.sock")
		return validInstanceID(id) && (!strings.Contains(id, "-") || isUID(id))
	}
	return false
}

// isUID reports whether s has the form of a Kubernetes UID (a UUID).
func isUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if r != '-' {
				return false
			}
			continue
		}
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// upgradeMetrics count what the hand-over does.
type upgradeMetrics struct {
	forwarded *prometheus.CounterVec
	retries   *prometheus.CounterVec
	reclaims  prometheus.Counter
	held      prometheus.GaugeFunc
}

func newUpgradeMetrics(a *Agent) *upgradeMetrics {
	return &upgradeMetrics{
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "dranode", Name: "forwarded_calls_total",
			Help: "Kubelet calls this instance forwarded to the instance holding the claim record (rolling upgrade), by result.",
		}, []string{"driver", "result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "dranode", Name: "forward_retries_total",
			Help: "Forwarding attempts that found the holder of the claim record unavailable and were retried.",
		}, []string{"driver"}),
		reclaims: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "dranode", Name: "record_reclaims_total",
			Help: "Times this instance took the claim record back from an instance that was gone.",
		}),
		held: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "dranode", Name: "record_held",
			Help: "1 while this instance holds the claim record and serves the kubelet's calls itself; 0 while it forwards them.",
		}, func() float64 {
			if a.holdsRecord() {
				return 1
			}
			return 0
		}),
	}
}

func (m *upgradeMetrics) register(a *Agent) error {
	for _, c := range []prometheus.Collector{m.forwarded, m.retries, m.reclaims, m.held} {
		if err := a.opts.Registry.Register(c); err != nil {
			return fmt.Errorf("registering the hand-over metrics: %w", err)
		}
		a.metrics.collectors = append(a.metrics.collectors, c)
	}
	return nil
}
