// Package conformance checks a running driver plugin against the dranode
// plugin contract, through the real host side: vendors launch their binary
// with pluginmgr.Launch in a test and hand the plugin to Run.
//
// Devices are held to inventory.Validate, the validator that the inventory
// module's integration tests hold to a real API server, so a driver learns
// about a device the API server would reject in its own tests instead of
// from a refused ResourceSlice. The checks of its own are those the API
// server does not make: container edits and opaque configuration kinds.
package conformance
