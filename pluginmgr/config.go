package pluginmgr

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/dranode/dranode/inventory"
)

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

// Options tune the host side. The zero value works.
type Options struct {
	// NodeName is passed to Driver.Configure.
	NodeName string
	// Logger receives the host's log and the plugins' log streams;
	// default: hclog to stderr at Info.
	Logger hclog.Logger
	// StartTimeout bounds each start of the process, the go-plugin
	// handshake, Configure and Info together; default 10s.
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
