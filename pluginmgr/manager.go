package pluginmgr

import (
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
}

// NewManager returns a manager whose plugins share opts.
func NewManager(opts Options) *Manager {
	return &Manager{opts: opts, plugins: map[string]*Plugin{}}
}

// Start launches every configured plugin. Names must be unique. Start is
// meant to be called once, from one goroutine. Plugins that
// fail to start are reported together in the returned error, each as a
// *StartError naming it; the others keep running.
func (m *Manager) Start(configs []PluginConfig) error {
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
		m.mu.Unlock()
		if running {
			errs = append(errs, fmt.Errorf("%w: plugin %q is already running", ErrInvalidConfig, cfg.Name))
			continue
		}
		p, err := Launch(cfg, m.opts)
		if err != nil {
			errs = append(errs, &StartError{Plugin: cfg.Name, Err: err})
			continue
		}
		m.mu.Lock()
		m.plugins[cfg.Name] = p
		m.mu.Unlock()
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

// Close stops every plugin.
func (m *Manager) Close() error {
	m.mu.Lock()
	plugins := m.plugins
	m.plugins = map[string]*Plugin{}
	m.mu.Unlock()
	var errs []error
	for _, p := range plugins {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}
