// Package pluginmgr is the contract between the dranode agent and vendor
// driver plugins, which run as separate processes through hashicorp/go-plugin
// over gRPC.
//
// The plugin side is a Driver implementation handed to Serve from the
// vendor's main; it sends its devices as inventory.Inventory, the type the
// ResourceSlice publisher takes. The host side is Launch (one plugin) or Manager (an explicit
// list of plugins): each binary is checked against its configured SHA-256,
// started with automatic mutual TLS, configured, and supervised. A plugin that
// exits is restarted with capped exponential backoff and its device stream
// resumes; calls caught by the exit fail with an error matching
// ErrPluginUnavailable (gRPC code Unavailable), which callers retry; a plugin
// that keeps failing is reported as crash looping and left stopped. The
// context given to Launch and Manager.Start bounds the start only; Close
// ends a plugin, and may be called more than once, concurrently.
//
// A plugin logs with Logger (hclog JSON on its stderr); the host re-logs
// each line once through Options.Logger, on a logger named after the
// plugin, at the line's level with its fields, and any other stderr line
// (a panic) as well; LogrLogger makes that logger a logr.Logger's, so a
// host logging with klog has one format.
//
// Kubernetes objects cross the process boundary in their own protobuf
// encoding inside the protocol messages (see proto/dranode/plugin/v1).
package pluginmgr
