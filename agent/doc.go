// Package agent is the dranode reference node agent, which composes the other
// dranode modules: it registers with the kubelet, serves the kubelet's DRA
// gRPC API, publishes ResourceSlices and keeps the durable record of prepared
// claims.
//
// The module is filled in by the agent issue; it has no functionality yet.
package agent
