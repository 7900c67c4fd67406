// Package claimcache is the durable record of the ResourceClaims a node agent
// has prepared: per claim its state, the devices and CDI device IDs per
// driver, the pods that use it and the boot it was prepared in. Every change
// is durable before the call that made it returns.
package claimcache
