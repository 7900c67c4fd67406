package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// EnvPrefix is the prefix of environment variables that set configuration
// keys: the key upper-cased with dots replaced by underscores, e.g.
// DRANODE_NODENAME, DRANODE_KUBELET_REGISTRYDIR, DRANODE_SLICES_SYNCDELAY.
const EnvPrefix = "DRANODE"

// ErrInvalid is matched (errors.Is) by every configuration error; the
// error is an *Error naming the key.
var ErrInvalid = errors.New("invalid agent configuration")

// Error names the configuration key that is wrong and why.
type Error struct {
	Key    string
	Reason string
	// Err is the underlying error, if any (a *fs.PathError for a path the
	// agent cannot use), for errors.Is and errors.As; Reason already says
	// what it says.
	Err error
}

func (e *Error) Error() string {
	return fmt.Sprintf("configuration key %q: %s", e.Key, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) match.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Config is the agent's configuration. Its keys (in files, flags and
// environment variables) are declared in one table (keys.go), each with its
// default and checks; the agent README's table of keys is made from it.
type Config struct {
	// NodeName is the Kubernetes node this agent serves; default: the host
	// name.
	NodeName string
	// Kubeconfig selects cluster mode with this file. Empty: in-cluster
	// configuration when running in a pod, standalone mode otherwise.
	Kubeconfig string
	// StateDir holds the claim record (ClaimRecordDir) and, in standalone
	// mode, the dry-run slices.
	StateDir string
	// BootIDFile identifies the boot; a different content means the node
	// rebooted and every recorded claim must be prepared again.
	BootIDFile string
	Kubelet    Kubelet
	CDI        CDI
	Plugins    Plugins
	Slices     Slices
	Claims     Claims
	HTTP       HTTP
	Cleanup    Cleanup
	// ShutdownTimeout bounds the wait for calls in flight on SIGTERM.
	ShutdownTimeout time.Duration
	// MemoryLimit is the Go runtime's soft memory limit for the agent
	// process, a quantity ("40Mi"); "0" leaves the runtime's own setting
	// (the GOMEMLIMIT variable, or none). The agent package's ApplyMemoryLimit
	// sets it.
	MemoryLimit string
}

// Kubelet is where the kubelet's plugin directories and its DRA checkpoint
// are (under its --root-dir), and this instance's name among the agents of
// one node.
type Kubelet struct {
	// RegistryDir gets one registration socket per driver,
	// "<driver>-reg.sock".
	RegistryDir string
	// PluginsDir gets one DRA socket per driver, "<driver>/dra.sock".
	PluginsDir string
	// DRAManagerState is the kubelet's own checkpoint of the claims it
	// prepared ("dra_manager_state" in its root directory). The agent
	// only reads it: to reconcile a damaged record (a claim whose last
	// state the damage hid is kept while the kubelet lists it; a missing
	// file is read as "the kubelet lists nothing"), and to find leftover
	// claims (see Cleanup; a missing file stops the sweep).
	DRAManagerState string
	// InstanceID names this agent instance among the instances of one
	// node during a rolling (maxSurge) upgrade: the pod UID, from the
	// downward API. Set, the sockets are "<driver>-<id>-reg.sock" and
	// "<driver>/dra-<id>.sock" (the names of the upstream kubeletplugin
	// helper's RollingUpdate option), and the claim record is handed over
	// between instances (see DESIGN.md, "Seamless upgrades"). Empty: "<driver>-reg.sock" and
	// "<driver>/dra.sock", one instance at a time.
	InstanceID string
	// HandoverTimeout bounds how long a starting instance waits for the
	// claim record held by another instance.
	HandoverTimeout time.Duration
}

// CDI is where the container runtime loads CDI specs from.
type CDI struct {
	Dir string
	// DeviceMetadata writes each request's device metadata file and mounts
	// it into the claim's containers (KEP-5304; the agent package's metadata.go).
	DeviceMetadata bool
}

// Plugins lists the driver plugins to run.
type Plugins struct {
	Drivers []Driver
}

// Driver is one driver plugin binary.
type Driver struct {
	// Name identifies the plugin in logs and metrics; default: the binary's
	// base name. (The DRA driver name comes from the plugin itself.)
	Name string `mapstructure:"name" json:"name,omitempty"`
	// Path is the absolute path of the binary.
	Path string `mapstructure:"path" json:"path"`
	// SHA256 is the binary's hex digest, checked before every start.
	SHA256 string   `mapstructure:"sha256" json:"sha256"`
	Args   []string `mapstructure:"args" json:"args,omitempty"`
	// Config is the driver's own section, handed to its Configure as JSON
	// with its keys exactly as written in the file.
	Config map[string]any `mapstructure:"config" json:"config,omitempty"`
}

// Slices tunes ResourceSlice publishing.
type Slices struct {
	// SyncDelay coalesces inventory changes and slice events (a deleted
	// slice is put back after at most this delay plus one write).
	SyncDelay time.Duration
	// DryRunDir receives the slices as YAML in standalone mode; default
	// StateDir/slices.
	DryRunDir string
	// UnhealthyTaintEffect is the effect of the taint a device the plugin
	// reports unhealthy gets in the published slices (key
	// "<driver>/unhealthy", inventory.HealthTaintKey): NoSchedule (default:
	// no new allocations), NoExecute (also evicts the pods using it, where
	// the cluster runs the device taint eviction controller) or None (only
	// shows it).
	UnhealthyTaintEffect string
}

// Claims is where ResourceClaims are read from.
type Claims struct {
	// Dir holds ResourceClaim YAML files in standalone mode; default
	// StateDir/claims.
	Dir string
	// QPS and Burst limit the API client that reads claims on Prepare. The
	// kubelet prepares the claims of every pod starting on the node at
	// once: client-go's default (5/s, burst 10) would add about 200 ms per
	// claim beyond the tenth, so the defaults are 50/s with a burst of 100,
	// one GET per claim and driver call.
	QPS   float32
	Burst int
}

// Cleanup tunes the sweep of leftover claims: recorded claims that
// the kubelet's DRA checkpoint (kubelet.draManagerState) does not list and
// whose ResourceClaim is deleted, recreated under another UID or reserved
// for no pod. They are unprepared through their plugins and removed once
// they have been leftovers for GracePeriod. A claim the kubelet lists is
// never touched; when its checkpoint cannot be read, nothing is.
type Cleanup struct {
	// Interval between sweeps (the first runs at start); "0s" disables
	// the sweep.
	Interval time.Duration
	// GracePeriod an entry must have been a leftover, in every sweep
	// since it was first seen as one, before it is cleaned. It is
	// counted in memory: a restart starts it afresh.
	GracePeriod time.Duration
}

// HTTP is the operations endpoint: /metrics, /healthz, /readyz.
type HTTP struct {
	// Address to listen on ("host:port"); empty disables the endpoint.
	Address string
	// Pprof also serves Go's profiles under /debug/pprof/ (heap,
	// goroutines, CPU) for finding where memory or time goes. Off by
	// default: profiles show internals to whoever reaches the address.
	Pprof bool
}

// Default returns the defaults (DESIGN.md, "Files on the node").
func Default() Config {
	var c Config
	for _, k := range configKeys {
		k.setDefault(&c)
	}
	return c
}

// Validate reports the first invalid value, naming its key.
func (c Config) Validate() error {
	for _, k := range configKeys {
		if err := k.validate(c); err != nil {
			return err
		}
	}
	return nil
}

// ClaimRecordDir is the claim record's directory: "claims.record" in
// StateDir.
func (c Config) ClaimRecordDir() string { return filepath.Join(c.StateDir, "claims.record") }

// YAML returns the configuration in the file format, for `config print`.
func (c Config) YAML() ([]byte, error) {
	root := map[string]any{}
	for _, k := range configKeys {
		m := root
		parts := strings.Split(k.name(), ".")
		for _, section := range parts[:len(parts)-1] {
			if _, ok := m[section].(map[string]any); !ok {
				m[section] = map[string]any{}
			}
			m = m[section].(map[string]any)
		}
		m[parts[len(parts)-1]] = k.printed(c)
	}
	data, err := json.Marshal(root)
	if err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(data)
}

// DefaultMemoryLimit is memoryLimit's default (see Config.MemoryLimit).
const DefaultMemoryLimit = "32Mi"

// minMemoryLimit keeps a typo ("40Ki") from making the garbage collector
// run all the time: the agent's live heap alone is several MiB.
const minMemoryLimit = 16 << 20

// MemoryLimitBytes parses MemoryLimit: 0 means no limit of the agent's own.
func (c Config) MemoryLimitBytes() (int64, error) {
	if c.MemoryLimit == "" || c.MemoryLimit == "0" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(c.MemoryLimit)
	if err != nil {
		return 0, fmt.Errorf("%q is not a quantity such as \"40Mi\": %v", c.MemoryLimit, err)
	}
	n, ok := q.AsInt64()
	if !ok || n < 0 {
		return 0, fmt.Errorf("%q is not a byte count", c.MemoryLimit)
	}
	if n != 0 && n < minMemoryLimit {
		return 0, fmt.Errorf("%q is below the minimum of 16Mi (0 disables the limit)", c.MemoryLimit)
	}
	return n, nil
}
