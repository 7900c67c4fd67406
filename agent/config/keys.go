package config

//go:generate go test -run ^TestConfigKeyTableInREADME$ -update-readme .

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dranode/dranode/inventory"
)

// configKeys declares every configuration key, in the order of the README's
// table (and of Validate's checks). DESIGN.md, "Files on the node", has the
// defaults' reasons.
var configKeys = []configKey{
	nodeNameKey(),
	&setting[string]{key: "kubeconfig", flag: "kubeconfig", typ: "path",
		help:     "kubeconfig file (cluster mode); empty: in-cluster in a pod, else standalone",
		markdown: "cluster mode with this kubeconfig; empty: in-cluster config in a pod, else **standalone**",
		def:      func() string { return "" }, field: func(c *Config) *string { return &c.Kubeconfig }},
	withDoc(pathKey("stateDir", "state-dir", "directory of the agent's durable state", "/var/lib/dranode",
		func(c *Config) *string { return &c.StateDir }), "the claim record (`stateDir/claims.record`)"),
	withDoc(pathKey("bootIDFile", "boot-id-file", "file whose content identifies the boot", "/proc/sys/kernel/random/boot_id",
		func(c *Config) *string { return &c.BootIDFile }), "a changed content means the node rebooted"),
	withDoc(pathKey("kubelet.registryDir", "kubelet-registry-dir", "kubelet plugin registration directory", "/var/lib/kubelet/plugins_registry",
		func(c *Config) *string { return &c.Kubelet.RegistryDir }), "registration sockets"),
	withDoc(pathKey("kubelet.pluginsDir", "kubelet-plugins-dir", "directory for the DRA sockets", "/var/lib/kubelet/plugins",
		func(c *Config) *string { return &c.Kubelet.PluginsDir }), "DRA sockets"),
	&setting[string]{key: "kubelet.instanceID", flag: "kubelet-instance-id",
		help: "this instance's ID for rolling upgrades (the pod UID); empty: one instance per node",
		markdown: "this instance's ID for rolling upgrades (the pod UID; the chart passes `$(POD_UID)`): sockets `<driver>-<id>-reg.sock` and " +
			"`<driver>/dra-<id>.sock`, and the claim record is handed over between instances (see \"Seamless upgrades\"); empty: one instance per node, the names above",
		def: func() string { return "" }, field: func(c *Config) *string { return &c.Kubelet.InstanceID }, check: checkInstanceID},
	withCheck(durationKey("kubelet.handoverTimeout", "kubelet-handover-timeout",
		"how long a starting instance waits for the claim record held by another instance", 2*time.Minute,
		func(c *Config) *time.Duration { return &c.Kubelet.HandoverTimeout }), positive),
	// The kubelet's --root-dir, where its DRA manager keeps its checkpoint
	// (kubeletcompat.DRAManagerStateFile).
	withDoc(pathKey("kubelet.draManagerState", "kubelet-dra-manager-state",
		"the kubelet's DRA checkpoint, read to reconcile a damaged record and to find leftover claims", "/var/lib/kubelet/dra_manager_state",
		func(c *Config) *string { return &c.Kubelet.DRAManagerState }),
		"the kubelet's own DRA checkpoint (in its `--root-dir`), read only: to reconcile claims a damaged record left uncertain "+
			"(see \"A damaged claim record\"; a missing file lists nothing) and to find leftover claims (see \"Leftover claims\"; "+
			"a missing or unreadable file stops the sweep, and in standalone mode a missing file is expected: no kubelet)"),
	withDoc(pathKey("cdi.dir", "cdi-dir", "CDI spec directory of the container runtime", "/var/run/cdi",
		func(c *Config) *string { return &c.CDI.Dir }), "CDI specs"),
	&setting[bool]{key: "cdi.deviceMetadata", flag: "cdi-device-metadata",
		help: "mount each request's device metadata file (KEP-5304) into the claim's containers",
		markdown: "write each request's device metadata file (KEP-5304: the devices' attributes, as the upstream helper of Kubernetes 1.37 writes them) " +
			"under `kubelet.pluginsDir/<driver>/dra-device-metadata/` and mount it read-only into the claim's containers at " +
			"`/var/run/kubernetes.io/dra-device-attributes/…`; off by default (alpha in Kubernetes 1.36, beta in 1.37; see \"Device metadata\")",
		def: func() bool { return false }, field: func(c *Config) *bool { return &c.CDI.DeviceMetadata }},
	driversKey{},
	withCheck(durationKey("slices.syncDelay", "slices-sync-delay", "coalescing delay of ResourceSlice writes", 100*time.Millisecond,
		func(c *Config) *time.Duration { return &c.Slices.SyncDelay }), notNegative),
	derivedPath(pathKey("slices.dryRunDir", "slices-dry-run-dir", "standalone: where ResourceSlices are written as YAML (default stateDir/slices)", "",
		func(c *Config) *string { return &c.Slices.DryRunDir }), "slices", "standalone: slices as YAML files"),
	&setting[string]{key: "slices.unhealthyTaintEffect", flag: "slices-unhealthy-taint-effect",
		help: "effect of the taint on devices the plugin reports unhealthy: NoSchedule, NoExecute or None",
		markdown: "effect of the taint `<driver>/unhealthy` on devices the plugin reports unhealthy: `NoSchedule`, `NoExecute` or `None`, " +
			"as written (see \"Unhealthy devices\")",
		def: func() string { return string(resourceapi.DeviceTaintEffectNoSchedule) }, check: checkTaintEffect,
		field: func(c *Config) *string { return &c.Slices.UnhealthyTaintEffect }},
	derivedPath(pathKey("claims.dir", "claims-dir", "standalone: directory of ResourceClaim YAML files (default stateDir/claims)", "",
		func(c *Config) *string { return &c.Claims.Dir }), "claims", "standalone: ResourceClaim YAML files"),
	&setting[float32]{key: "claims.qps", flag: "claims-qps", help: "API client QPS for claim lookups",
		markdown: "API client QPS for claim lookups (see \"Claim lookups\")",
		def:      func() float32 { return 50 }, field: func(c *Config) *float32 { return &c.Claims.QPS },
		check: func(q float32) error { return failIf(q <= 0, "must be positive, got %v", q) }},
	&setting[int]{key: "claims.burst", flag: "claims-burst", help: "API client burst for claim lookups",
		markdown: "API client burst for claim lookups (see \"Claim lookups\")",
		def:      func() int { return 100 }, field: func(c *Config) *int { return &c.Claims.Burst },
		check: func(b int) error { return failIf(b < 1, "must be at least 1, got %d", b) }},
	&setting[string]{key: "http.address", flag: "http-address", typ: "host:port",
		help: "address of /metrics, /healthz, /readyz; empty disables", markdown: "`/metrics`, `/healthz`, `/readyz`; empty disables",
		def: func() string { return ":8085" }, field: func(c *Config) *string { return &c.HTTP.Address }, check: checkHTTPAddress},
	&setting[bool]{key: "http.pprof", flag: "http-pprof", help: "also serve Go's profiles on /debug/pprof/ at http.address",
		markdown: "also serve Go's profiles on `/debug/pprof/` (heap, goroutines, CPU); off by default because they show internals to whoever reaches the address",
		def:      func() bool { return false }, field: func(c *Config) *bool { return &c.HTTP.Pprof }},
	withDoc(withCheck(durationKey("cleanup.interval", "cleanup-interval", "interval between sweeps for leftover claims; 0s disables", time.Minute,
		func(c *Config) *time.Duration { return &c.Cleanup.Interval }),
		func(d time.Duration) error {
			return failIf(d < 0, "must not be negative (\"0s\" disables the sweep), got %s", d)
		}), "between sweeps for leftover claims (the first at start); `0s` disables the sweep"),
	withDoc(withCheck(durationKey("cleanup.gracePeriod", "cleanup-grace-period", "how long a claim must be a leftover before it is unprepared and removed", 10*time.Minute,
		func(c *Config) *time.Duration { return &c.Cleanup.GracePeriod }), positive),
		"how long a claim must have been a leftover, in every sweep since first seen, before it is unprepared and removed; must be positive"),
	withCheck(durationKey("shutdownTimeout", "shutdown-timeout", "wait for calls in flight on SIGTERM", 30*time.Second,
		func(c *Config) *time.Duration { return &c.ShutdownTimeout }), positive),
	&setting[string]{key: "memoryLimit", flag: "memory-limit", typ: "quantity",
		help:     "Go soft memory limit of the agent process (\"40Mi\"); 0 keeps GOMEMLIMIT",
		markdown: "Go soft memory limit of the `dranode-agent` process (see \"Memory\"); `0` keeps the runtime's own (`GOMEMLIMIT`, or none); at least `16Mi`",
		def:      func() string { return DefaultMemoryLimit }, field: func(c *Config) *string { return &c.MemoryLimit },
		extra: func(c Config) error {
			if _, err := c.MemoryLimitBytes(); err != nil {
				return &Error{Key: "memoryLimit", Reason: err.Error()}
			}
			return nil
		}},
}

func withDoc[T any](s *setting[T], markdown string) *setting[T] { s.markdown = markdown; return s }

func withCheck[T any](s *setting[T], check func(T) error) *setting[T] { s.check = check; return s }

// derivedPath is a path that defaults to a directory in stateDir.
func derivedPath(s *setting[string], dir, markdown string) *setting[string] {
	s.markdown = markdown
	s.docDef = "`stateDir/" + dir + "`"
	s.fill = func(c Config) string {
		if c.StateDir == "" {
			return ""
		}
		return filepath.Join(c.StateDir, dir)
	}
	return s
}

func nodeNameKey() configKey {
	return &setting[string]{key: "nodeName", flag: "node-name", help: "Kubernetes node name",
		markdown: "the node; slices and claim checks use it", docDef: "host name",
		def: func() string {
			host, _ := os.Hostname()
			return strings.ToLower(host)
		},
		field: func(c *Config) *string { return &c.NodeName },
		check: func(n string) error {
			if n == "" {
				return fmt.Errorf("must be set (the host name could not be read)")
			}
			return failIf(!isDNSSubdomain(n), "%q is not a DNS subdomain (lower case letters, digits, '-', '.')", n)
		}}
}

// failIf is a check's reason when bad.
func failIf(bad bool, format string, args ...any) error {
	if bad {
		return fmt.Errorf(format, args...)
	}
	return nil
}

func checkInstanceID(id string) error {
	return failIf(id != "" && !ValidInstanceID(id),
		"%q: only letters, digits, '-', '_' and '.', at most 63 characters (a pod UID fits)", id)
}

func checkTaintEffect(e string) error {
	return failIf(inventory.ValidateTaintEffect(resourceapi.DeviceTaintEffect(e)) != nil,
		"%q: must be NoSchedule, NoExecute or None (as written: the API's effects are case-sensitive)", e)
}

func checkHTTPAddress(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	// What net.Listen accepts: a number up to 65535 or a service name
	// (from /etc/services, never the network).
	_, err = net.LookupPort("tcp", port)
	return failIf(err != nil, "%q: port %q is not a port number (0 to 65535) or a known service name", addr, port)
}
