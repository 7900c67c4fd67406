package pluginmgr

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/hashicorp/go-plugin"

	"github.com/dranode/dranode/inventory"
	pb "github.com/dranode/dranode/pluginmgr/proto/dranode/plugin/v1"
)

// instance is one process of a plugin, from a completed start until kill.
type instance struct {
	client *plugin.Client
	// stop kills the process at once (the cancel of its exec.CommandContext).
	stop context.CancelFunc
	rpc  pb.DriverPluginClient
	pid  int
	info Info
}

// kill ends the process, asking it to exit first (go-plugin's Kill), and
// waits until it is reaped.
func (i *instance) kill() {
	i.client.Kill()
	i.stop()
}

// Launch verifies and starts the plugin, waits for its handshake, Configure
// and Info, and supervises it from then on. A failure here is returned (with
// one of the Err* start errors) rather than retried: a plugin that cannot
// start once is a configuration problem.
//
// ctx bounds the start only: when it ends before the plugin is up, the
// process is killed and the error wraps ctx.Err(). Once Launch has
// returned, the plugin runs until Close.
func Launch(ctx context.Context, cfg PluginConfig, opts Options) (*Plugin, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("plugin %q: not started: %w", cfg.Name, err)
	}
	opts = opts.withDefaults()
	sockDir, err := makeSocketDir(opts.Logger.Named(cfg.Name))
	if err != nil {
		return nil, fmt.Errorf("plugin %q: socket directory: %w", cfg.Name, err)
	}
	life, cancel := context.WithCancel(context.Background())
	p := &Plugin{
		cfg: cfg, opts: opts, log: opts.Logger.Named(cfg.Name), sockDir: sockDir,
		ctx: life, cancel: cancel, done: make(chan struct{}), invWait: make(chan struct{}),
	}
	inst, err := p.start(ctx)
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

// start verifies the binary and runs one plugin process up to a configured,
// usable state, within StartTimeout. When ctx ends first, the process is
// killed and the error wraps ctx.Err().
func (p *Plugin) start(ctx context.Context) (*instance, error) {
	if err := verifyBinary(p.cfg.Path); err != nil {
		return nil, fmt.Errorf("plugin %q: %w", p.cfg.Name, err)
	}
	// One deadline covers the handshake, Configure and Info.
	startCtx, cancel := context.WithTimeoutCause(ctx, p.opts.StartTimeout, ErrStartTimeout)
	defer cancel()
	// The process must outlive startCtx, yet die with it while the start is
	// in progress: go-plugin's handshake takes no context and holds the
	// client's lock until it ends (so Client.Kill would wait for it), but a
	// process killed under it ends the handshake at once.
	procCtx, stop := context.WithCancel(context.Background())
	abandon := context.AfterFunc(startCtx, stop)
	inst, err := p.startProcess(startCtx, procCtx)
	if inst != nil {
		inst.stop = stop
	}
	if !abandon() && err == nil {
		// startCtx ended just as the start completed: the process is being
		// killed, so the start failed after all.
		inst.kill()
		err = errors.New("start abandoned")
	}
	if err == nil {
		return inst, nil
	}
	stop()
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, fmt.Errorf("plugin %q: start abandoned: %w", p.cfg.Name, ctxErr)
	}
	if context.Cause(startCtx) == ErrStartTimeout {
		return nil, fmt.Errorf("plugin %q (%s): %w: not up after %s", p.cfg.Name, p.cfg.Path, ErrStartTimeout, p.opts.StartTimeout)
	}
	return nil, err
}

// startProcess runs the binary under procCtx and completes the go-plugin
// handshake, Configure and Info within ctx. On error nothing runs any more.
func (p *Plugin) startProcess(ctx, procCtx context.Context) (*instance, error) {
	expected, _ := hex.DecodeString(p.cfg.SHA256)
	stderr := &tailBuffer{limit: 8 << 10}
	cmd := exec.CommandContext(procCtx, p.cfg.Path, p.cfg.Args...)
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
		// A backstop only: ctx ends a start that takes StartTimeout by
		// killing the process, so go-plugin's own timeout, which it reports
		// as a bare string, never fires first.
		StartTimeout: 2 * p.opts.StartTimeout,
		Logger:       &clientLogger{Logger: p.log, binary: filepath.Base(p.cfg.Path)},
		Stderr:       stderr,
		SyncStdout:   &lineLogger{log: p.log, stream: "stdout"},
		SyncStderr:   &lineLogger{log: p.log, stream: "stderr"},
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
		StatelessPrepare:  resp.GetStatelessPrepare(),
	}
	if err := inventory.ValidateDriverName(inst.info.DriverName); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidInfo, err)
	}
	p.mu.Lock()
	first := p.info.DriverName
	p.mu.Unlock()
	if first != "" && first != inst.info.DriverName {
		return fmt.Errorf("%w: driver name changed from %q to %q across a restart", ErrInvalidInfo, first, inst.info.DriverName)
	}
	return nil
}
