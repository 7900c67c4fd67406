// Package agent is the reference dranode node agent: it runs the driver
// plugins named in its configuration (pluginmgr), registers each driver with
// the kubelet and serves the kubelet's DRA gRPC API (k8s.io/kubelet dra v1 and
// v1beta1, dra-health v1), keeps the durable record of prepared claims
// (claimcache), writes one transient CDI spec per claim and driver (cdi), and
// publishes every driver's inventory as ResourceSlices (sliceclient).
//
// The agent's configuration is package config (agent/config): its keys,
// Load (flags, DRANODE_ environment variables, the YAML file, defaults),
// Validate, and the checks of `config validate` against the node. The
// command dranode-agent (cmd/dranode-agent) is a thin layer over the two:
// config.Load, then New and Run. The record holder is package
// agent/internal/record: it opens the claim record, gates the operations on
// it and hands it over between two instances of the agent on one node. The
// doc comment of Agent lists the other parts and the files each is in.
//
// Without a kubeconfig and outside a cluster the agent runs standalone:
// ResourceClaims come from a directory of YAML files and ResourceSlices go to
// a dry-run directory, so the whole claim flow works without an API server.
//
// A plugin whose binary cannot be trusted (wrong SHA-256, not executable;
// see VerifyPluginBinary) is refused alone — never run, registered or
// published — and reported by Agent.Refused, Ready and the
// dranode_plugin_refused metric, while the other drivers are served.
//
// A damaged claim record does not make the agent forget prepared claims:
// Start keeps what came before the damage, logs the damage and every claim
// whose last state it hid (dranode_record_uncertain_claims counts them), and
// before serving the kubelet reconciles those claims against the kubelet's
// own DRA checkpoint (config.Kubelet.DRAManagerState) and the claim source,
// unpreparing through the plugins only claims that are gone.
package agent
