package pluginmgr

import (
	"bytes"
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
