// Package conformance checks a running driver plugin against the dranode
// plugin contract, through the real host side: vendors launch their binary
// with pluginmgr.Launch in a test and hand the plugin to Run.
//
// The device checks reimplement the ResourceSlice API's validation rules
// that apply to what a plugin publishes (names, attribute and capacity keys
// and values, per-device limits, counter sets), so a driver learns about a
// bad device in its own tests instead of from an API server rejecting the
// slice.
package conformance
