// Package sliceclient publishes one node's device inventory for one DRA
// driver as resource.k8s.io/v1 ResourceSlices, with as few API writes as
// possible.
//
// A [Publisher] takes the driver's whole inventory (an inventory.Inventory:
// pools of devices and shared counter sets) through [Publisher.Update],
// validates it with package inventory (a rejected one matches
// inventory.ErrInvalid), splits each pool into slices within the API's
// limits, and keeps the API server's slices equal to it: it watches its own
// slices (field selectors spec.nodeName and spec.driver) and puts back
// anything someone else deleted or edited.
//
// Writes are minimal because devices keep the slice they were assigned to: a
// change confined to some slices updates just those slices, in place, without
// a pool generation bump. The generation is bumped, rewriting the pool, only
// when slices must be added or removed or a device must move between slices.
//
// A process that publishes for many nodes can give its publishers one
// [Watcher], a single watch of the driver's slices on all nodes, instead of
// one watch per publisher; [MaxWritesInFlight] optionally bounds the writes
// those publishers have in flight together.
//
// [WriteDir] is a dry-run sink: it writes the slices that would be published
// as YAML files to a directory, for running without a cluster.
package sliceclient
