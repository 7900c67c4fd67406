// Package testbin builds the module's test plugins for its tests, which run
// them as real processes through the host side, and digests them the way a
// PluginConfig names them.
package testbin
