// Command slicebench runs the same ResourceSlice publishing scenarios
// against dranode's sliceclient and the upstream publisher
// (k8s.io/dynamic-resource-allocation/resourceslice) on one real API server,
// counting each implementation's requests by verb with a wrapping transport
// and timing convergence: from the call that starts a change until the
// stored slices match.
//
//	cd compat/slicebench && GOWORK=off go run . -rounds 3
//
// It lives outside go.work so the upstream library's dependencies never
// reach the workspace. The results go in sliceclient/BENCHMARKS.md.
package main
