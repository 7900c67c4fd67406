package pluginmgr

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/dranode/dranode/inventory"
	pb "github.com/dranode/dranode/pluginmgr/proto/dranode/plugin/v1"
)

// ErrInvalidConfig: a PluginConfig is incomplete or malformed.
var ErrInvalidConfig = errors.New("invalid plugin configuration")

// PluginConfig names one plugin binary to run. Plugins are only ever started
// from such an explicit list; the host never scans directories.
type PluginConfig struct {
	// Name identifies the plugin in logs and status; default: the base name
	// of Path.
	Name string
	// Path is the absolute path of the plugin binary.
	Path string
	// SHA256 is the expected hex SHA-256 digest of the binary. Required: the
	// binary is verified before every start.
	SHA256 string
	// Args are passed to the binary.
	Args []string
	// Config is the plugin's section of the agent configuration (JSON),
	// handed to Driver.Configure.
	Config json.RawMessage
}

func (c PluginConfig) validate() (PluginConfig, error) {
	if c.Path == "" || !filepath.IsAbs(c.Path) {
		return c, fmt.Errorf("%w: plugin path %q must be absolute", ErrInvalidConfig, c.Path)
	}
	if c.Name == "" {
		c.Name = filepath.Base(c.Path)
	}
	c.SHA256 = strings.ToLower(c.SHA256)
	if b, err := hex.DecodeString(c.SHA256); err != nil || len(b) != sha256.Size {
		return c, fmt.Errorf("%w: plugin %q: sha256 %q is not 64 hex digits", ErrInvalidConfig, c.Name, c.SHA256)
	}
	if len(c.Config) > 0 && !json.Valid(c.Config) {
		return c, fmt.Errorf("%w: plugin %q: config is not valid JSON", ErrInvalidConfig, c.Name)
	}
	return c, nil
}

// Backoff is the delay between restart attempts: Initial after the first
// failure, doubling up to Max. A plugin that ran for ResetAfter before it
// failed starts again from Initial.
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	ResetAfter time.Duration
}

func (b Backoff) delay(consecutive int) time.Duration {
	d := b.Initial
	for i := 1; i < consecutive && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// CrashLoopPolicy stops restarting a plugin that failed MaxFailures times
// within Window.
type CrashLoopPolicy struct {
	MaxFailures int
	Window      time.Duration
}

// Options tune the host side. The zero value works.
type Options struct {
	// NodeName is passed to Driver.Configure.
	NodeName string
	// Logger receives the host's log and the plugins' log streams;
	// default: hclog to stderr at Info.
	Logger hclog.Logger
	// StartTimeout bounds the handshake, Configure and Info; default 10s.
	StartTimeout time.Duration
	// CallTimeout bounds calls whose context has no deadline; default 30s.
	CallTimeout time.Duration
	// Backoff between restarts; default 500ms doubling to 30s, reset after
	// a minute of running.
	Backoff Backoff
	// CrashLoop; default 5 failures within 10 minutes.
	CrashLoop CrashLoopPolicy
	// OnInventory is called with every inventory a plugin sends, from one
	// goroutine per plugin.
	OnInventory func(plugin string, inv inventory.Inventory)
	// OnHealth is called with every health snapshot of plugins that report
	// health.
	OnHealth func(plugin string, health []DeviceHealth)
	// OnStatus is called on every state change of a plugin (running,
	// restarting, crash looping, stopped), from the plugin's supervising
	// goroutine (and from Close); it must not call Close.
	OnStatus func(Status)
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = hclog.New(&hclog.LoggerOptions{Name: "pluginmgr", Level: hclog.Info, Output: os.Stderr})
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 10 * time.Second
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 30 * time.Second
	}
	if o.Backoff.Initial <= 0 {
		o.Backoff.Initial = 500 * time.Millisecond
	}
	if o.Backoff.Max < o.Backoff.Initial {
		o.Backoff.Max = max(30*time.Second, o.Backoff.Initial)
	}
	if o.Backoff.ResetAfter <= 0 {
		o.Backoff.ResetAfter = time.Minute
	}
	if o.CrashLoop.MaxFailures <= 0 {
		o.CrashLoop.MaxFailures = 5
	}
	if o.CrashLoop.Window <= 0 {
		o.CrashLoop.Window = 10 * time.Minute
	}
	return o
}

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

// Plugin is the host side of one running driver plugin: it owns the process,
// restarts it when it fails, and forwards calls to it.
type Plugin struct {
	cfg     PluginConfig
	opts    Options
	log     hclog.Logger
	sockDir string

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
	invWire  *pb.Inventory
	invSeq   uint64
	invWait  chan struct{} // closed and replaced on every inventory
	closeErr error
	closed   bool
}

type instance struct {
	client *plugin.Client
	rpc    pb.DriverPluginClient
	pid    int
	info   Info
}

// Launch verifies and starts the plugin, waits for its handshake, Configure
// and Info, and supervises it from then on. A failure here is returned (with
// one of the Err* start errors) rather than retried: a plugin that cannot
// start once is a configuration problem.
func Launch(cfg PluginConfig, opts Options) (*Plugin, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	sockDir, err := os.MkdirTemp("", "dranode-plugin-")
	if err != nil {
		return nil, fmt.Errorf("plugin %q: socket directory: %w", cfg.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Plugin{
		cfg: cfg, opts: opts, log: opts.Logger.Named(cfg.Name), sockDir: sockDir,
		ctx: ctx, cancel: cancel, done: make(chan struct{}), invWait: make(chan struct{}),
	}
	inst, err := p.start()
	if err != nil {
		cancel()
		_ = os.RemoveAll(sockDir)
		return nil, err
	}
	p.mu.Lock()
	p.info = inst.info
	p.mu.Unlock()
	p.up(inst, false)
	go p.supervise(inst)
	return p, nil
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

// start verifies the binary and runs one plugin process up to a configured,
// usable state.
func (p *Plugin) start() (*instance, error) {
	if err := verifyBinary(p.cfg.Path); err != nil {
		return nil, fmt.Errorf("plugin %q: %w", p.cfg.Name, err)
	}
	expected, _ := hex.DecodeString(p.cfg.SHA256)
	stderr := &tailBuffer{limit: 8 << 10}
	cmd := exec.Command(p.cfg.Path, p.cfg.Args...)
	// The plugin creates its socket here, so Close can remove what a killed
	// plugin leaves behind.
	cmd.Env = []string{plugin.EnvUnixSocketDir + "=" + p.sockDir}
	killWithHost(cmd)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{ProtocolVersion: {pluginKey: &grpcPlugin{}}},
		Cmd:              cmd,
		SecureConfig:     &plugin.SecureConfig{Checksum: expected, Hash: sha256.New()},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     p.opts.StartTimeout,
		Logger:           p.log,
		Stderr:           stderr,
		SyncStdout:       &lineLogger{log: p.log, stream: "stdout"},
		SyncStderr:       &lineLogger{log: p.log, stream: "stderr"},
	})
	rpcClient, err := client.Client()
	if err != nil {
		client.Kill()
		if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
			return nil, fmt.Errorf("plugin %q: %w", p.cfg.Name, checksumError(p.cfg.Path, p.cfg.SHA256))
		}
		return nil, fmt.Errorf("plugin %q (%s): %w", p.cfg.Name, p.cfg.Path, classifyStartError(err, stderr.String()))
	}
	raw, err := rpcClient.Dispense(pluginKey)
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("plugin %q: dispense: %w", p.cfg.Name, err)
	}
	inst := &instance{client: client, rpc: raw.(pb.DriverPluginClient)}
	if rc := client.ReattachConfig(); rc != nil {
		inst.pid = rc.Pid
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.opts.StartTimeout)
	defer cancel()
	if err := p.handshakeCalls(ctx, inst); err != nil {
		client.Kill()
		return nil, fmt.Errorf("plugin %q: %w", p.cfg.Name, err)
	}
	return inst, nil
}

func (p *Plugin) handshakeCalls(ctx context.Context, inst *instance) error {
	if _, err := inst.rpc.Configure(ctx, &pb.ConfigureRequest{NodeName: p.opts.NodeName, Config: p.cfg.Config}); err != nil {
		return fmt.Errorf("Configure: %w", err)
	}
	resp, err := inst.rpc.Info(ctx, &pb.InfoRequest{})
	if err != nil {
		return fmt.Errorf("Info: %w", err)
	}
	inst.info = Info{
		DriverName:        resp.GetDriverName(),
		DriverVersion:     resp.GetDriverVersion(),
		Health:            resp.GetHealth(),
		OpaqueConfigKinds: resp.GetOpaqueConfigKinds(),
	}
	if errs := validation.IsDNS1123Subdomain(inst.info.DriverName); len(errs) > 0 {
		return fmt.Errorf("%w: driver name %q: %s", ErrInvalidInfo, inst.info.DriverName, strings.Join(errs, "; "))
	}
	p.mu.Lock()
	first := p.info.DriverName
	p.mu.Unlock()
	if first != "" && first != inst.info.DriverName {
		return fmt.Errorf("%w: driver name changed from %q to %q across a restart", ErrInvalidInfo, first, inst.info.DriverName)
	}
	return nil
}

// verifyBinary refuses a missing or non-executable binary before go-plugin
// runs it. The digest is checked by go-plugin's SecureConfig right before
// exec, so the binary is hashed once per start; only a mismatch hashes it
// again, to name the actual digest.
func verifyBinary(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotExecutable, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file (%s)", ErrNotExecutable, path, fi.Mode().Type())
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%w: %s has mode %s", ErrNotExecutable, path, fi.Mode().Perm())
	}
	return nil
}

// VerifyBinary checks what Launch checks before it runs a plugin: path is
// an executable regular file whose SHA-256 is sha256Hex. The error matches
// ErrNotExecutable (and os.ErrNotExist for a missing file) or
// ErrChecksumMismatch (a *ChecksumError naming both digests). Launch itself
// needs no earlier call: it is for checking a configuration ahead of time.
func VerifyBinary(path, sha256Hex string) error {
	if err := verifyBinary(path); err != nil {
		return err
	}
	actual, err := fileSHA256(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotExecutable, err)
	}
	if want := strings.ToLower(sha256Hex); actual != want {
		return &ChecksumError{Path: path, Expected: want, Actual: actual}
	}
	return nil
}

// checksumError reports a digest mismatch with both digests.
func checksumError(path, wantHex string) error {
	actual, err := fileSHA256(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrChecksumMismatch, err)
	}
	return &ChecksumError{Path: path, Expected: wantHex, Actual: actual}
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// go-plugin reports handshake failures as plain strings; these are the ones
// it uses in v1.8.
var startErrorPatterns = []struct {
	substr string
	err    error
}{
	{"timeout while waiting for plugin to start", ErrStartTimeout},
	{"incompatible API version with plugin", ErrNoCommonVersion},
}

// cookieRefusal is the start of what go-plugin's Serve prints when the
// handshake cookie is missing or different.
const cookieRefusal = "This binary is a plugin"

func classifyStartError(err error, stderr string) error {
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENOEXEC) || errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %v", ErrNotExecutable, err)
	}
	msg := err.Error()
	for _, pat := range startErrorPatterns {
		if strings.Contains(msg, pat.substr) {
			return fmt.Errorf("%w: %s", pat.err, firstLine(msg))
		}
	}
	if strings.Contains(msg, "plugin exited before we could connect") || strings.Contains(msg, "Failed to read any lines from plugin's stdout") {
		if strings.Contains(stderr, cookieRefusal) {
			return fmt.Errorf("%w (the binary is a plugin for another host, or not built with pluginmgr.Serve)", ErrMagicCookie)
		}
		return fmt.Errorf("%w; its stderr ended with: %q", ErrExitedBeforeHandshake, lastLines(stderr, 5))
	}
	if strings.Contains(msg, "Unrecognized remote plugin message") {
		return fmt.Errorf("%w: %s", ErrStdoutBeforeHandshake, firstLine(msg))
	}
	return err
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// lineLogger logs what a plugin writes to its own stdout and stderr after
// the handshake (go-plugin forwards both), one log entry per line.
type lineLogger struct {
	log     hclog.Logger
	stream  string
	mu      sync.Mutex
	pending []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = append(l.pending, p...)
	for {
		i := bytes.IndexByte(l.pending, '\n')
		if i < 0 {
			break
		}
		l.log.Info("plugin output", "stream", l.stream, "line", string(l.pending[:i]))
		l.pending = l.pending[i+1:]
	}
	if len(l.pending) > 4096 { // a very long line without newline
		l.log.Info("plugin output", "stream", l.stream, "line", string(l.pending))
		l.pending = nil
	}
	return len(p), nil
}

// tailBuffer keeps the last limit bytes written to it.
type tailBuffer struct {
	mu    sync.Mutex
	limit int
	buf   []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.limit; over > 0 {
		b.buf = bytes.Clone(b.buf[over:])
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
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
	var failures []time.Time
	consecutive := 0
	for {
		started := time.Now()
		err := p.follow(inst)
		p.mu.Lock()
		p.inst = nil
		restarts := p.status.Restarts
		p.mu.Unlock()
		inst.client.Kill()
		if p.ctx.Err() != nil {
			return
		}
		p.log.Warn("plugin failed", "error", err)
		p.clearSockets()
		if time.Since(started) >= p.opts.Backoff.ResetAfter {
			consecutive = 0
		}
		for {
			now := time.Now()
			consecutive++
			kept := failures[:0]
			for _, t := range failures {
				if now.Sub(t) < p.opts.CrashLoop.Window {
					kept = append(kept, t)
				}
			}
			failures = append(kept, now)
			if len(failures) >= p.opts.CrashLoop.MaxFailures {
				p.log.Error("plugin is crash looping; not restarting it", "failures", len(failures), "window", p.opts.CrashLoop.Window, "error", err)
				p.report(Status{State: StateCrashLoop, Restarts: restarts, Failures: consecutive,
					Err: fmt.Errorf("%w: %d failures within %s, last: %w", ErrCrashLoop, len(failures), p.opts.CrashLoop.Window, err)})
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
			inst, err = p.start()
			if err == nil {
				p.up(inst, true)
				break
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
	ctx, cancel := p.callContext(ctx)
	defer cancel()
	resp, err := inst.rpc.Unprepare(ctx, &pb.UnprepareRequest{Claims: preparedClaimsToWire(claims)})
	if err != nil {
		return nil, p.callError("Unprepare", ctx, inst, err)
	}
	results, err := unprepareResultsFromWire(claims, resp.GetClaims())
	if err != nil {
		return nil, fmt.Errorf("plugin %q Unprepare: %w", p.cfg.Name, err)
	}
	return results, nil
}

// Close stops supervision and the plugin process (asking it to exit, then
// killing it), and removes the plugin's socket directory. It waits for
// everything to be gone.
func (p *Plugin) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return p.closeErr
	}
	p.closed = true
	wait := p.invWait
	p.invWait = make(chan struct{})
	p.mu.Unlock()
	close(wait)
	// The supervisor stops the process when its stream ends; killing it here
	// as well would race two shutdowns and turn a graceful exit into a kill.
	p.cancel()
	<-p.done
	st := p.Status()
	p.report(Status{State: StateStopped, Restarts: st.Restarts})
	p.closeErr = os.RemoveAll(p.sockDir)
	return p.closeErr
}
