package pluginmgr

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors for the ways a plugin can fail to start. Launch wraps them with the
// plugin's path and the underlying reason; match them with errors.Is.
var (
	// ErrInvalidConfig: a PluginConfig is incomplete or malformed.
	ErrInvalidConfig = errors.New("invalid plugin configuration")
	// ErrNotExecutable: the configured path is missing, not a regular file
	// or lacks execute permission.
	ErrNotExecutable = errors.New("plugin binary is not executable")
	// ErrChecksumMismatch: the binary's SHA-256 differs from the configured
	// one. The error is a *ChecksumError with both digests.
	ErrChecksumMismatch = errors.New("plugin binary checksum mismatch")
	// ErrMagicCookie: the binary is a go-plugin plugin for another host
	// (different handshake cookie) and refused to start.
	ErrMagicCookie = errors.New("plugin rejected the handshake magic cookie")
	// ErrNoCommonVersion: host and plugin share no protocol version.
	ErrNoCommonVersion = errors.New("no common plugin protocol version")
	// ErrStdoutBeforeHandshake: the plugin wrote something other than the
	// go-plugin handshake line to stdout first.
	ErrStdoutBeforeHandshake = errors.New("plugin wrote to stdout before the handshake")
	// ErrStartTimeout: the plugin did not complete the handshake in time.
	ErrStartTimeout = errors.New("plugin start timed out")
	// ErrExitedBeforeHandshake: the plugin exited before the handshake for
	// another reason (see its log).
	ErrExitedBeforeHandshake = errors.New("plugin exited before the handshake")
	// ErrInvalidInfo: the plugin's Info answer is unusable.
	ErrInvalidInfo = errors.New("plugin info is invalid")

	// ErrPluginUnavailable is retryable: the plugin process is gone or
	// being restarted. Errors matching it also carry gRPC code Unavailable
	// (status.Code(err) == codes.Unavailable).
	ErrPluginUnavailable = errors.New("driver plugin unavailable")
	// ErrCrashLoop: the plugin failed too often within the crash-loop window
	// and is no longer restarted. Not retryable.
	ErrCrashLoop = errors.New("driver plugin is crash looping")
	// ErrClosed: the host side was closed.
	ErrClosed = errors.New("plugin host closed")
	// ErrInvalidResponse: the plugin answered with something the host cannot
	// use (an undecodable object, a missing claim result).
	ErrInvalidResponse = errors.New("invalid response from plugin")
)

// ChecksumError names the file and both digests of a failed verification.
type ChecksumError struct {
	Path     string
	Expected string
	Actual   string
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("plugin binary %s: sha256 is %s, configuration expects %s", e.Path, e.Actual, e.Expected)
}

// Is makes errors.Is(err, ErrChecksumMismatch) match.
func (e *ChecksumError) Is(target error) bool { return target == ErrChecksumMismatch }

// StartError is one plugin's failure in Manager.Start, so that a caller can
// tell which plugin failed and decide for each (the agent refuses a plugin
// whose binary cannot be trusted and keeps serving the others).
type StartError struct {
	Plugin string // the configured plugin name
	Err    error
}

func (e *StartError) Error() string { return e.Err.Error() }

func (e *StartError) Unwrap() error { return e.Err }

// UnavailableError is returned for calls that could not complete because the
// plugin process went away. It matches ErrPluginUnavailable and reports gRPC
// code Unavailable, so callers that forward it over gRPC (the kubelet retries
// those) keep the retryable meaning.
type UnavailableError struct {
	Plugin string
	Cause  error
}

func (e *UnavailableError) Error() string {
	if e.Cause == nil {
		return fmt.Sprintf("driver plugin %q unavailable", e.Plugin)
	}
	return fmt.Sprintf("driver plugin %q unavailable: %v", e.Plugin, e.Cause)
}

func (e *UnavailableError) Unwrap() error { return e.Cause }

// Is makes errors.Is(err, ErrPluginUnavailable) match.
func (e *UnavailableError) Is(target error) bool { return target == ErrPluginUnavailable }

// GRPCStatus lets status.Code and status.FromError see code Unavailable.
func (e *UnavailableError) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, e.Error())
}

// ClaimError is a per-claim failure reported by the plugin.
type ClaimError struct {
	ClaimUID string
	Message  string
}

func (e *ClaimError) Error() string {
	return fmt.Sprintf("claim %s: %s", e.ClaimUID, e.Message)
}
