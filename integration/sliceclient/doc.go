// Package sliceclient tests github.com/dranode/dranode/sliceclient from the
// outside, through its exported API, against a real etcd and kube-apiserver
// (tools/envtest): publishing, restarts, minimal writes counted by the API
// server's audit log, drift repair, dropped fields, the shared Watcher and
// its bound on writes in flight.
package sliceclient
