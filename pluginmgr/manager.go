package pluginmgr

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
)

// Manager runs the plugins of an explicit configuration list.
type Manager struct {
	opts    Options
	mu      sync.Mutex
	plugins map[string]*Plugin
	closed  bool
}

// NewManager returns a manager whose plugins share opts.
func NewManager(opts Options) *Manager {
	return &Manager{opts: opts, plugins: map[string]*Plugin{}}
}

// Start launches every configured plugin, one after the other. Names must
// be unique. Plugins that fail to start are reported together in the
// returned error, each as a *StartError naming it; the others keep running.
//
// ctx bounds the starts only, as in Launch: when it ends, the plugin being
// started is killed and it and the ones not started yet fail with errors
// wrapping ctx.Err(); plugins already running keep running until Close.
// Start after Close starts nothing and fails with ErrClosed.
func (m *Manager) Start(ctx context.Context, configs []PluginConfig) error {
	seen := map[string]bool{}
	var errs []error
	for _, cfg := range configs {
		cfg, err := cfg.validate()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[cfg.Name] {
			errs = append(errs, fmt.Errorf("%w: plugin name %q used twice", ErrInvalidConfig, cfg.Name))
			continue
		}
		seen[cfg.Name] = true
		m.mu.Lock()
		_, running := m.plugins[cfg.Name]
		closed := m.closed
		m.mu.Unlock()
		if closed {
			return errors.Join(append(errs, fmt.Errorf("starting plugins: %w", ErrClosed))...)
		}
		if running {
			errs = append(errs, fmt.Errorf("%w: plugin %q is already running", ErrInvalidConfig, cfg.Name))
			continue
		}
		p, err := Launch(ctx, cfg, m.opts)
		if err != nil {
			errs = append(errs, &StartError{Plugin: cfg.Name, Err: err})
			continue
		}
		m.mu.Lock()
		closed = m.closed
		if !closed {
			m.plugins[cfg.Name] = p
		}
		m.mu.Unlock()
		if closed {
			// Close ran while this plugin started and could not see it.
			p.Close()
			return errors.Join(append(errs, &StartError{Plugin: cfg.Name, Err: fmt.Errorf("plugin %q: %w", cfg.Name, ErrClosed)})...)
		}
	}
	return errors.Join(errs...)
}

// Plugin returns the running plugin of that name.
func (m *Manager) Plugin(name string) (*Plugin, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.plugins[name]
	return p, ok
}

// Statuses returns every plugin's status, sorted by name.
func (m *Manager) Statuses() []Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Status, 0, len(m.plugins))
	for _, p := range m.plugins {
		out = append(out, p.Status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Plugin < out[j].Plugin })
	return out
}

// Close stops every plugin, all at once, and returns when their processes
// are gone. Close may be called more than once and from several goroutines;
// every call returns only when the plugins are gone.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	plugins := make([]*Plugin, 0, len(m.plugins))
	for _, p := range m.plugins {
		plugins = append(plugins, p)
	}
	m.mu.Unlock()
	// Plugin.Close waits for an earlier or concurrent Close of the same
	// plugin, so a second Manager.Close that still sees them waits too.
	errs := make([]error, len(plugins))
	var wg sync.WaitGroup
	for i, p := range plugins {
		wg.Go(func() { errs[i] = p.Close() })
	}
	wg.Wait()
	m.mu.Lock()
	for _, p := range plugins {
		delete(m.plugins, p.Name())
	}
	m.mu.Unlock()
	return errors.Join(errs...)
}
