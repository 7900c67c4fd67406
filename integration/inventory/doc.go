// Package inventory holds inventory.Validate to a real kube-apiserver: its
// validation cases (inventorytest.Cases) are sent to the server as the
// ResourceSlices they would be published as, in a server-side dry run.
package inventory
