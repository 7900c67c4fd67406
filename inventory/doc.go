// Package inventory describes what one DRA driver has on one node: pools of
// resource.k8s.io/v1 devices and the shared counters they consume from. It
// is the one type the driver-plugin protocol (pluginmgr) carries and the
// ResourceSlice publisher (sliceclient) publishes, and Validate holds it to
// the limits the API server enforces, so that an inventory refused by the
// server is refused here first, with the field that is wrong.
//
// Every rejection is a *ValidationError listing each Problem with its field
// path; it matches ErrInvalid with errors.Is.
package inventory
