// Package pluginmgr is the contract between the dranode agent and vendor
// driver plugins, which run as separate processes through hashicorp/go-plugin:
// the protocol, the host side that launches and supervises plugin binaries,
// and the plugin side that vendors call from main.
//
// The module is filled in by the driver-plugin issue; it has no functionality
// yet.
package pluginmgr
