// Package claimstatus writes one DRA driver's entries of a ResourceClaim's
// status.devices (KEP-4817: per-device conditions, opaque data and network
// data) with server-side apply.
//
// A [Writer] applies, under a field manager of its own per driver
// ("dranode/<driver>" by default), an apply configuration that holds only
// this driver's entries. status.devices is a map keyed by driver, pool,
// device and share ID, so other drivers' entries, owned by their own
// managers, are never touched; and because server-side apply removes what
// a manager owned and no longer applies, [Writer.Apply] with fewer devices
// removes the rest of the driver's entries and [Writer.Clear] removes them
// all. Every apply carries the claim's UID, so a claim deleted and created
// again under the same name is never written by mistake.
//
// What the API server (v1.37) requires of the writer: permission to patch
// resourceclaims/status and, with the DRAResourceClaimGranularStatusAuthorization
// feature gate (beta, on by default since v1.36), permission on the
// synthetic subresource resourceclaims/driver, with the driver's name as
// resource name and verb "associated-node:patch" for a service account whose
// token is bound to the node the claim is allocated on (a DaemonSet pod's
// token is), or "arbitrary-node:patch" otherwise. A refused write is a
// *[WriteError]; [Reason] gives a short reason for metrics.
//
// A [Queue] writes in the background for a driver's NodePrepareResources:
// coalesced per claim, yielding to the kubelet's calls until they have been
// quiet for a moment ([Calls], [QueueOptions.Quiet]),
// retried when the failure may pass, and with no write on unprepare (the
// API server drops the status of a deallocated claim itself).
package claimstatus
