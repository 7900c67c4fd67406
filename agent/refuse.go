package agent

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dranode/dranode/agent/config"
	"github.com/dranode/dranode/pluginmgr"
)

// ErrPluginRefused is matched (errors.Is) by a *PluginRefusedError.
var ErrPluginRefused = errors.New("driver plugin refused")

// PluginRefusedError says why the agent refused to run one configured
// plugin. Err matches pluginmgr.ErrChecksumMismatch (a
// *pluginmgr.ChecksumError with both digests) or pluginmgr.ErrNotExecutable.
type PluginRefusedError struct {
	Plugin string // the configured plugin name
	Path   string
	Err    error
}

func (e *PluginRefusedError) Error() string {
	return fmt.Sprintf("plugin %q refused: %v", e.Plugin, e.Err)
}

func (e *PluginRefusedError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrPluginRefused) match.
func (e *PluginRefusedError) Is(target error) bool { return target == ErrPluginRefused }

// VerifyPluginBinary checks, ahead of time, what the agent's plugin
// manager checks before it runs a plugin: d.Path is an executable regular
// file whose SHA-256 is d.SHA256 (pluginmgr.VerifyBinary). The error
// matches pluginmgr.ErrNotExecutable or pluginmgr.ErrChecksumMismatch (a
// *pluginmgr.ChecksumError naming both digests). A plugin that would fail
// it is refused on its own when the agent starts; the other drivers are
// served.
func VerifyPluginBinary(d config.Driver) error {
	return pluginmgr.VerifyBinary(d.Path, d.SHA256)
}

// refuse records that a plugin will not run and says so in the log, with
// both digests when the checksum is the reason.
func (a *Agent) refuse(d config.Driver, err error) {
	name := pluginName(d)
	r := &PluginRefusedError{Plugin: name, Path: d.Path, Err: err}
	kv := []any{"plugin", name, "path", d.Path}
	var ce *pluginmgr.ChecksumError
	if errors.As(err, &ce) {
		kv = append(kv, "expectedSHA256", ce.Expected, "actualSHA256", ce.Actual)
	}
	a.log.Error(err, "Driver plugin refused: it is not started, registered with the kubelet nor published; the other drivers are served", kv...)
	a.drivers.mu.Lock()
	a.drivers.refused = append(a.drivers.refused, r)
	a.drivers.mu.Unlock()
}

// refuseUntrusted handles the error of pluginmgr's Start: each plugin
// whose binary cannot be trusted (wrong digest, not executable, missing)
// is refused alone; any other failure is returned.
func (a *Agent) refuseUntrusted(startErr error) error {
	errs := []error{startErr}
	if joined, ok := startErr.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	var fatal []error
	for _, err := range errs {
		var se *pluginmgr.StartError
		d, configured := config.Driver{}, false
		if errors.As(err, &se) && (errors.Is(err, pluginmgr.ErrChecksumMismatch) || errors.Is(err, pluginmgr.ErrNotExecutable)) {
			i := slices.IndexFunc(a.cfg.Plugins.Drivers, func(d config.Driver) bool { return pluginName(d) == se.Plugin })
			if configured = i >= 0; configured {
				d = a.cfg.Plugins.Drivers[i]
			}
		}
		if !configured {
			fatal = append(fatal, err)
			continue
		}
		a.refuse(d, err)
	}
	return errors.Join(fatal...)
}

// Refused returns the plugins the agent refused to run, by name.
func (a *Agent) Refused() []*PluginRefusedError {
	a.drivers.mu.Lock()
	defer a.drivers.mu.Unlock()
	out := slices.Clone(a.drivers.refused)
	slices.SortFunc(out, func(x, y *PluginRefusedError) int { return strings.Compare(x.Plugin, y.Plugin) })
	return out
}

func (a *Agent) isRefused(plugin string) bool {
	return slices.ContainsFunc(a.Refused(), func(r *PluginRefusedError) bool { return r.Plugin == plugin })
}

// pluginName is the plugin's name as pluginmgr uses it: the configured name,
// or the binary's base name (config.Load fills it in; a configuration built
// in code may leave it empty).
func pluginName(d config.Driver) string {
	if d.Name != "" {
		return d.Name
	}
	return filepath.Base(d.Path)
}
