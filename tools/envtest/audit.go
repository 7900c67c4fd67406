package envtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
)

// ErrAuditDisabled is returned by AuditEvents when Environment.Audit was not
// set.
var ErrAuditDisabled = errors.New("envtest: auditing is off (set Environment.Audit)")

// AuditEvent is the part of an apiserver audit event (audit.k8s.io/v1
// Event) that tests count writes by.
type AuditEvent struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource   string `json:"resource"`
		APIGroup   string `json:"apiGroup"`
		APIVersion string `json:"apiVersion"`
		Namespace  string `json:"namespace"`
		Name       string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// DryRun reports whether the request was a dry run (dryRun=All): the
// server admitted, defaulted and validated it and stored nothing, so it is
// no write, although its verb says create or update.
func (e AuditEvent) DryRun() bool { return DryRunRequest(e.RequestURI) }

// Write reports whether the event is a completed request that changed
// what the server stores: a write verb at stage ResponseComplete, not a
// dry run.
func (e AuditEvent) Write() bool {
	switch e.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return e.Stage == "ResponseComplete" && !e.DryRun()
	}
	return false
}

// DryRunRequest reports whether an audit event's requestURI asked for a
// dry run, for audit readers with event types of their own.
func DryRunRequest(requestURI string) bool {
	u, err := url.ParseRequestURI(requestURI)
	return err == nil && u.Query().Has("dryRun")
}

// AuditEvents reads the audit log written so far. With the default policy
// every write appears once, at stage ResponseComplete (or Panic).
func (e *Environment) AuditEvents() ([]AuditEvent, error) {
	path := e.AuditLogPath()
	if path == "" {
		return nil, ErrAuditDisabled
	}
	return readAuditLog(path)
}

func readAuditLog(path string) ([]AuditEvent, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // nothing audited yet
	}
	if err != nil {
		return nil, fmt.Errorf("envtest: reading audit log: %w", err)
	}
	// A line still being written has no newline yet; it is read next time.
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i+1]
	} else {
		data = nil
	}
	var events []AuditEvent
	for line, b := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		if len(b) == 0 {
			continue
		}
		var ev AuditEvent
		if err := json.Unmarshal(b, &ev); err != nil {
			return nil, fmt.Errorf("envtest: audit log %s line %d: %w", path, line+1, err)
		}
		events = append(events, ev)
	}
	return events, nil
}
