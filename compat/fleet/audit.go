package fleet

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/dranode/dranode/tools/envtest"
)

// AuditPolicy records every request, reads and watches included, at the
// Metadata level. Reads are what a fleet costs the API server most of, so
// the default policy of envtest (writes only) would miss them. A watch
// appears at ResponseStarted (when it is established) and ResponseComplete
// (when it ends), every other request once, at ResponseComplete.
const AuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// UserPrefix starts the user name each node's kubeconfig impersonates.
const UserPrefix = "fleet:"

// NodeUser is the user node's driver acts as (NodeKubeconfig).
func NodeUser(node string) string { return UserPrefix + node }

// AuditEvent is the part of an audit.k8s.io/v1 Event the fleet counts by.
type AuditEvent struct {
	AuditID          string    `json:"auditID"`
	Stage            string    `json:"stage"`
	Verb             string    `json:"verb"`
	RequestURI       string    `json:"requestURI"`
	StageTimestamp   time.Time `json:"stageTimestamp"`
	ImpersonatedUser *struct {
		Username string `json:"username"`
	} `json:"impersonatedUser"`
	ObjectRef *struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	// Offset is where the event starts in the log, for phases.
	Offset int64 `json:"-"`
}

// Node is the fleet node whose driver made the request, "" for anyone
// else (the harness, the scheduler).
func (e *AuditEvent) Node() string {
	if e.ImpersonatedUser == nil {
		return ""
	}
	n, ok := strings.CutPrefix(e.ImpersonatedUser.Username, UserPrefix)
	if !ok {
		return ""
	}
	return n
}

// Kind is "verb resource", e.g. "watch resourceslices"; a request that is
// not for a resource (discovery, /version) is "verb path". A dry run's
// verb is "dry-run-" and the verb (the agent's probe at its start is
// "dry-run-create resourceslices").
func (e *AuditEvent) Kind() string {
	path, _, _ := strings.Cut(e.RequestURI, "?")
	verb := e.Verb
	if e.dryRun() {
		verb = "dry-run-" + verb
	}
	if e.ObjectRef != nil && e.ObjectRef.Resource != "" {
		return verb + " " + e.ObjectRef.Resource
	}
	return verb + " " + path
}

// IsWrite says whether the request may change state: a dry run stores
// nothing.
func (e *AuditEvent) IsWrite() bool {
	switch e.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return !e.dryRun()
	}
	return false
}

func (e *AuditEvent) dryRun() bool { return envtest.DryRunRequest(e.RequestURI) }

// isRequest says whether the event is the one event counted for its
// request: a watch when it was established (or when it failed before it
// was), anything else when it completed.
func (e *AuditEvent) isRequest() bool {
	if e.Verb == "watch" {
		if e.Stage == "ResponseStarted" {
			return true
		}
		// A watch refused before it started has no ResponseStarted.
		return e.Stage != "ResponseStarted" && e.ResponseStatus != nil && e.ResponseStatus.Code >= 300
	}
	return e.Stage == "ResponseComplete" || e.Stage == "Panic"
}

// Audit reads an audit log (JSON lines) written by a running API server.
type Audit struct{ Path string }

// Offset is the log's size now: the mark between two phases. The API
// server writes events synchronously (blocking mode) but only after the
// response went out, so a request whose response or watch event a client
// has seen may still be logged after the mark: wait for its event
// (waitWrites) where that matters.
func (a Audit) Offset() (int64, error) {
	fi, err := os.Stat(a.Path)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("audit log: %w", err)
	}
	return fi.Size(), nil
}

// Events reads the complete lines of the log.
func (a Audit) Events() ([]AuditEvent, error) {
	f, err := os.Open(a.Path)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var events []AuditEvent
	var off int64
	for {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			// A line without its newline is still being written.
			return events, nil
		}
		if err != nil {
			return nil, fmt.Errorf("audit log: %w", err)
		}
		var ev AuditEvent
		if len(bytes.TrimSpace(line)) > 0 {
			if err := json.Unmarshal(line, &ev); err != nil {
				return nil, fmt.Errorf("audit log at byte %d: %w", off, err)
			}
			ev.Offset = off
			events = append(events, ev)
		}
		off += int64(len(line))
	}
}

// Counts are requests by kind ("verb resource").
type Counts map[string]int

// Total is the sum over kinds.
func (c Counts) Total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// Writes is the sum over the kinds whose verb writes.
func (c Counts) Writes() int {
	n := 0
	for k, v := range c {
		ev := AuditEvent{Verb: strings.SplitN(k, " ", 2)[0]}
		if ev.IsWrite() {
			n += v
		}
	}
	return n
}

// String lists the kinds in order, "verb resource=n, ...".
func (c Counts) String() string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, c[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// PerNode counts the requests made by fleet nodes in [from, to) of the log,
// by node and kind.
func PerNode(events []AuditEvent, from, to int64) map[string]Counts {
	out := map[string]Counts{}
	for i := range events {
		ev := &events[i]
		if ev.Offset < from || ev.Offset >= to || !ev.isRequest() {
			continue
		}
		node := ev.Node()
		if node == "" {
			continue
		}
		if out[node] == nil {
			out[node] = Counts{}
		}
		out[node][ev.Kind()]++
	}
	return out
}

// OpenWatches counts, per node and watched resource, the watches
// established before offset at and not ended before it.
func OpenWatches(events []AuditEvent, at int64) map[string]Counts {
	open := map[string]*AuditEvent{}
	for i := range events {
		ev := &events[i]
		if ev.Offset >= at || ev.Verb != "watch" || ev.Node() == "" {
			continue
		}
		switch ev.Stage {
		case "ResponseStarted":
			open[ev.AuditID] = ev
		default:
			delete(open, ev.AuditID)
		}
	}
	out := map[string]Counts{}
	for _, ev := range open {
		if out[ev.Node()] == nil {
			out[ev.Node()] = Counts{}
		}
		out[ev.Node()][ev.Kind()]++
	}
	return out
}

// PeakPerSecond is the largest number of fleet requests, of the nodes
// accepted by keep, that completed (or, for watches, started) within one
// second of each other in [from, to): how bunched up the fleet's requests
// were, e.g. its reconnects after an API server restart.
func PeakPerSecond(events []AuditEvent, from, to int64, keep func(node string) bool) (peak, total int) {
	times := requestTimes(events, from, to, keep)
	j := 0
	for i := range times {
		for times[i].Sub(times[j]) >= time.Second {
			j++
		}
		peak = max(peak, i-j+1)
	}
	return peak, len(times)
}

// PerSecond counts the same requests as PeakPerSecond in the seconds
// from the first of them: how the fleet's reconnects were spread.
func PerSecond(events []AuditEvent, from, to int64, keep func(node string) bool) []int {
	times := requestTimes(events, from, to, keep)
	var out []int
	for _, t := range times {
		sec := int(t.Sub(times[0]) / time.Second)
		for len(out) <= sec {
			out = append(out, 0)
		}
		out[sec]++
	}
	return out
}

// requestTimes are the times of the requests of the nodes keep accepts
// in [from, to), sorted.
func requestTimes(events []AuditEvent, from, to int64, keep func(node string) bool) []time.Time {
	var times []time.Time
	for i := range events {
		ev := &events[i]
		if ev.Offset < from || ev.Offset >= to || !ev.isRequest() || ev.Node() == "" || !keep(ev.Node()) {
			continue
		}
		times = append(times, ev.StageTimestamp)
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	return times
}
