// Package pluginv1 is the generated code of the dranode driver plugin
// protocol, version 1 (plugin.proto next to it). Regenerate it with
// "make generate" in the pluginmgr directory; never edit the .pb.go files.
package pluginv1
