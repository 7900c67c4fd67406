package pluginmgr

import (
	"bytes"
	"errors"
	"io"
	"log"
	"slices"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/hashicorp/go-hclog"
)

// LogrLogger returns an hclog.Logger that writes through log, for
// Options.Logger: a host whose own log is a logr.Logger (klog in the
// agent) gets the plugins' lines, the host's lines about them and
// go-plugin's in its one format instead of hclog's.
//
// hclog levels map onto logr verbosity as Kubernetes components use it:
// Error is log.Error, Warn and Info are log.Info (logr has no warning
// level), Debug is log.V(4) and Trace log.V(5). Every line carries
// "level" with the hclog level's name, so a warning or a plugin's debug
// line stays recognizable in a text log, and "plugin" with the logger's
// hclog name: the host names each plugin's logger after the plugin
// (PluginConfig.Name), which is also the key the agent's own lines about
// a plugin use. An "error" value that is an error, or a string as in a
// plugin's JSON line, becomes the err of log.Error.
//
// The level (GetLevel, IsDebug, ...) follows log's enabled verbosity;
// SetLevel only raises it further (a level below what log enables is not
// logged twice over: log decides).
func LogrLogger(log logr.Logger) hclog.Logger {
	return &logrLogger{log: log, min: new(atomic.Int32)}
}

type logrLogger struct {
	log     logr.Logger
	name    string
	implied []any
	// min is the level set by SetLevel (hclog.NoLevel: log decides),
	// shared by loggers derived with With and Named as in hclog.
	min *atomic.Int32
}

var _ hclog.Logger = (*logrLogger)(nil)

// verbosity is the logr V-level of an hclog level.
func verbosity(level hclog.Level) int {
	switch level {
	case hclog.Trace:
		return 5
	case hclog.Debug:
		return 4
	default:
		return 0
	}
}

func (l *logrLogger) enabled(level hclog.Level) bool {
	if level == hclog.Off {
		return false
	}
	if m := hclog.Level(l.min.Load()); m != hclog.NoLevel && level < m {
		return false
	}
	return level >= hclog.Error || l.log.V(verbosity(level)).Enabled()
}

func (l *logrLogger) Log(level hclog.Level, msg string, args ...any) {
	l.emit(level, msg, args)
}

func (l *logrLogger) emit(level hclog.Level, msg string, args []any) {
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	if !l.enabled(level) {
		return
	}
	kv := make([]any, 0, 4+len(l.implied)+len(args))
	if l.name != "" {
		kv = append(kv, "plugin", l.name)
	}
	kv = append(kv, "level", level.String())
	kv = append(kv, l.implied...)
	kv = append(kv, args...)
	// Skip emit, Log or Info, and the hclog method: the caller's line is
	// what klog should name.
	lg := l.log.WithCallDepth(2)
	if level >= hclog.Error {
		err, rest := takeError(kv)
		lg.Error(err, msg, rest...)
		return
	}
	lg.V(verbosity(level)).Info(msg, kv...)
}

// takeError moves the "error" value out of kv when it is an error, or a
// string (an error as a plugin's JSON line carries it).
func takeError(kv []any) (error, []any) {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] != "error" {
			continue
		}
		var err error
		switch v := kv[i+1].(type) {
		case error:
			err = v
		case string:
			err = errors.New(v)
		default:
			continue
		}
		return err, slices.Delete(slices.Clone(kv), i, i+2)
	}
	return nil, kv
}

func (l *logrLogger) Trace(msg string, args ...any) { l.emit(hclog.Trace, msg, args) }
func (l *logrLogger) Debug(msg string, args ...any) { l.emit(hclog.Debug, msg, args) }
func (l *logrLogger) Info(msg string, args ...any)  { l.emit(hclog.Info, msg, args) }
func (l *logrLogger) Warn(msg string, args ...any)  { l.emit(hclog.Warn, msg, args) }
func (l *logrLogger) Error(msg string, args ...any) { l.emit(hclog.Error, msg, args) }

func (l *logrLogger) IsTrace() bool { return l.enabled(hclog.Trace) }
func (l *logrLogger) IsDebug() bool { return l.enabled(hclog.Debug) }
func (l *logrLogger) IsInfo() bool  { return l.enabled(hclog.Info) }
func (l *logrLogger) IsWarn() bool  { return l.enabled(hclog.Warn) }
func (l *logrLogger) IsError() bool { return l.enabled(hclog.Error) }

func (l *logrLogger) ImpliedArgs() []any { return slices.Clone(l.implied) }

func (l *logrLogger) With(args ...any) hclog.Logger {
	c := *l
	if len(args)%2 == 1 {
		// hclog's convention for a dangling key.
		args = append(slices.Clone(args), hclog.MissingKey)
	}
	c.implied = append(slices.Clone(l.implied), args...)
	return &c
}

func (l *logrLogger) Name() string { return l.name }

func (l *logrLogger) Named(name string) hclog.Logger {
	c := *l
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

func (l *logrLogger) ResetNamed(name string) hclog.Logger {
	c := *l
	c.name = name
	return &c
}

func (l *logrLogger) SetLevel(level hclog.Level) { l.min.Store(int32(level)) }

func (l *logrLogger) GetLevel() hclog.Level {
	for _, level := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info} {
		if l.enabled(level) {
			return level
		}
	}
	return hclog.Error
}

func (l *logrLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

func (l *logrLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	level := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = opts.ForceLevel
	}
	return writerFunc(func(p []byte) (int, error) {
		l.emit(level, string(bytes.TrimRight(p, "\r\n")), nil)
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
