package harness

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dranode/dranode/tools/envtest"
)

// NewInstance is a second agent process on a's node, as a DaemonSet with
// maxSurge starts it during a rolling upgrade: the same state, CDI, device
// and kubelet directories, its own instance ID, configuration, log and
// HTTP address; the same environment (a's TMPDIR and Opts.Env). Start runs
// it.
func (a *Agent) NewInstance(instanceID string) (*Agent, error) {
	b := *a
	b.Opts.InstanceID = instanceID
	b.ConfigPath = filepath.Join(a.Opts.Dir, "agent-"+instanceID+".yaml")
	b.Process = &Process{
		Path: a.Opts.Bins.Agent, Args: []string{"--config", b.ConfigPath},
		LogPath: filepath.Join(a.Opts.Dir, "agent-"+instanceID+".log"), Output: a.Opts.Log,
		Env: a.Process.Env,
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	b.HTTPAddr = "127.0.0.1:" + strconv.Itoa(port)
	if err := b.WriteConfig(); err != nil {
		return nil, err
	}
	return &b, nil
}

// SliceWrites counts the ResourceSlice writes (create, update, patch,
// delete, deletecollection) in events that concern node: made by an agent
// of that node (its user agent names the node) or naming the node in the
// request (the kubelet's wipe selects the node's slices).
func SliceWrites(events []envtest.AuditEvent, node string) (int, []string) {
	var n int
	var what []string
	for _, ev := range events {
		if ev.ObjectRef == nil || ev.ObjectRef.Resource != "resourceslices" || !ev.Write() {
			continue
		}
		if !strings.Contains(ev.UserAgent, node) && !strings.Contains(ev.RequestURI, node) && !strings.Contains(ev.ObjectRef.Name, node) {
			continue
		}
		n++
		what = append(what, fmt.Sprintf("%s %s by %q", ev.Verb, ev.RequestURI, ev.UserAgent))
	}
	return n, what
}
