// Package claimstatus tests github.com/dranode/dranode/sliceclient/claimstatus
// from the outside against a real etcd and kube-apiserver (tools/envtest,
// RBAC on): server-side apply of one driver's status.devices entries next
// to another driver's, their removal, the UID precondition, and that the
// Helm chart's ClusterRole is exactly what the API server requires of the
// agent's service account.
package claimstatus
