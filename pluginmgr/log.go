package pluginmgr

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

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

// clientLogger is the logger go-plugin's client gets for one plugin. That
// client logs two things through it: the lines the plugin process writes
// to its stderr, on a logger it names after the binary (JSON lines from
// the plugin's hclog re-logged at their own level with their fields, any
// other line as a bare message), and its own progress ("starting plugin",
// "waiting for RPC address", its "stdio" logger), which says nothing a
// host operator needs beyond what the supervisor logs. clientLogger sends
// the plugin's lines on to the host's per-plugin logger, a bare line at
// Info at least so that a panic or a plugin without hclog is never hidden,
// and demotes go-plugin's own lines to Trace (Error ones to Debug).
type clientLogger struct {
	hclog.Logger        // the host's logger for this plugin
	binary       string // filepath.Base of the plugin's path: go-plugin's name for its stderr
}

func (c *clientLogger) Log(level hclog.Level, msg string, args ...any) {
	// go-plugin names the binary "plugin"; the host's logger already
	// carries the plugin's configured name.
	args = slices.Clone(args)
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == "plugin" {
			args[i] = "path"
		}
	}
	c.Logger.Log(ownLevel(level), msg, args...)
}
func (c *clientLogger) Trace(msg string, args ...any) { c.Log(hclog.Trace, msg, args...) }
func (c *clientLogger) Debug(msg string, args ...any) { c.Log(hclog.Debug, msg, args...) }
func (c *clientLogger) Info(msg string, args ...any)  { c.Log(hclog.Info, msg, args...) }
func (c *clientLogger) Warn(msg string, args ...any)  { c.Log(hclog.Warn, msg, args...) }
func (c *clientLogger) Error(msg string, args ...any) { c.Log(hclog.Error, msg, args...) }

func ownLevel(level hclog.Level) hclog.Level {
	if level >= hclog.Error {
		return hclog.Debug
	}
	return hclog.Trace
}

func (c *clientLogger) With(args ...any) hclog.Logger {
	return &clientLogger{Logger: c.Logger.With(args...), binary: c.binary}
}

func (c *clientLogger) Named(name string) hclog.Logger {
	if name == c.binary {
		return &stderrLogger{Logger: c.Logger}
	}
	// go-plugin's own sub-loggers keep the plugin's name alone.
	return c
}

func (c *clientLogger) ResetNamed(name string) hclog.Logger { return c.Named(name) }

// stderrLogger receives what go-plugin read from the plugin's stderr.
type stderrLogger struct {
	hclog.Logger // the host's logger for this plugin
}

func (s *stderrLogger) Log(level hclog.Level, msg string, args ...any) {
	if len(args) == 0 {
		if msg == "" {
			return // the blank lines of a panic's output
		}
		// Not a JSON line: go-plugin adds at least "timestamp" to those.
		// It guessed Debug for a line without a "[LEVEL]" prefix, Error
		// from a panic on; neither may hide it.
		if level < hclog.Info && !strings.HasPrefix(msg, "[TRACE]") && !strings.HasPrefix(msg, "[DEBUG]") {
			level = hclog.Info
		}
		s.Logger.Log(level, "plugin output", "stream", "stderr", "line", msg)
		return
	}
	s.Logger.Log(level, msg, jsonFields(args)...)
}

// jsonFields turns the fields go-plugin made of a JSON line into the
// host's: the host logs its own timestamp; hclog's "@module" (the plugin
// logger's name) and "@caller" lose the "@"; and the fields, which
// go-plugin takes from a map in random order, are sorted (module first),
// so that one line reads the same every time.
func jsonFields(args []any) []any {
	type field struct {
		k string
		v any
	}
	var fields []field
	for i := 0; i+1 < len(args); i += 2 {
		k, ok := args[i].(string)
		if !ok {
			k = fmt.Sprint(args[i])
		}
		if k == "timestamp" {
			continue
		}
		fields = append(fields, field{strings.TrimPrefix(k, "@"), args[i+1]})
	}
	slices.SortStableFunc(fields, func(a, b field) int {
		if (a.k == "module") != (b.k == "module") {
			if a.k == "module" {
				return -1
			}
			return 1
		}
		return strings.Compare(a.k, b.k)
	})
	out := make([]any, 0, 2*len(fields))
	for _, f := range fields {
		out = append(out, f.k, f.v)
	}
	return out
}

func (s *stderrLogger) Trace(msg string, args ...any) { s.Log(hclog.Trace, msg, args...) }
func (s *stderrLogger) Debug(msg string, args ...any) { s.Log(hclog.Debug, msg, args...) }
func (s *stderrLogger) Info(msg string, args ...any)  { s.Log(hclog.Info, msg, args...) }
func (s *stderrLogger) Warn(msg string, args ...any)  { s.Log(hclog.Warn, msg, args...) }
func (s *stderrLogger) Error(msg string, args ...any) { s.Log(hclog.Error, msg, args...) }
