package pluginmgr

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// go-plugin v1.8 reports most handshake failures as errors.New strings with
// no type or sentinel to match, and a plugin that refuses the handshake
// cookie says so only on its stderr. This file is the one place that reads
// those strings; the handshake tests pin each of them against a real
// process, so a go-plugin upgrade that rewords one fails there. Everything
// of our own (checksums, timeouts, cancellation, file checks) is typed and
// decided before these are consulted.
const (
	// What go-plugin's client says when the plugin offers no protocol
	// version the host knows.
	msgIncompatibleVersion = "incompatible API version with plugin"
	// What it says when the process exits (or closes stdout) before the
	// handshake line.
	msgExitedBeforeConnect = "plugin exited before we could connect"
	msgNoStdoutLines       = "Failed to read any lines from plugin's stdout"
	// What it says when the first line on stdout is not a handshake line.
	msgUnrecognizedLine = "Unrecognized remote plugin message"
	// The start of what go-plugin's Serve prints to stderr when the
	// handshake cookie is missing or different.
	msgCookieRefusal = "This binary is a plugin"
)

// classifyStartError maps a failed go-plugin handshake to one of the Err*
// start errors; stderr is the end of what the process wrote there.
func classifyStartError(err error, stderr string) error {
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENOEXEC) || errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %v", ErrNotExecutable, err)
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, msgIncompatibleVersion):
		return fmt.Errorf("%w: %s", ErrNoCommonVersion, firstLine(msg))
	case strings.Contains(msg, msgExitedBeforeConnect) || strings.Contains(msg, msgNoStdoutLines):
		if strings.Contains(stderr, msgCookieRefusal) {
			return fmt.Errorf("%w (the binary is a plugin for another host, or not built with pluginmgr.Serve)", ErrMagicCookie)
		}
		return fmt.Errorf("%w; its stderr ended with: %q", ErrExitedBeforeHandshake, lastLines(stderr, 5))
	case strings.Contains(msg, msgUnrecognizedLine):
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
