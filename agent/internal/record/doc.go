// Package record is the agent's record holder: it opens the claim record
// (claimcache), gates the operations on it, hands it over to another
// instance of the agent on the same node and takes it back when that one
// is gone (DESIGN.md, "Seamless upgrades: two agents on one node").
//
// What a Holder guarantees:
//
//   - At most one process commits to the record: the record's exclusive
//     flock decides who holds it, and an instance that handed it over
//     closes it before it answers the hand-over.
//   - An operation admitted by Enter runs whole while this instance holds
//     the record: the gate's read side is held from Enter to leave.
//   - A hand-over waits for the operations in flight (the gate's write
//     side), holds back new ones, which then find the record gone, and
//     stops the Agent's publishers before the record is closed.
//   - A reclaim happens only when no other instance holds the record or is
//     starting: the kernel drops a dead process's flocks, so a lock taken is
//     proof of death; no timeout decides.
//
// Lock order: the gate is first in the agent's lock order (the doc comment
// of agent.Agent): a claim's lock, the driver set and the leaves are taken
// under it, never the other way round. The Agent's methods are called under
// the gate's write lock and must not Enter. The hand-over socket's own
// mutex is a leaf.
//
// The package does not import the agent: what it needs of it is the small
// Agent interface.
package record
