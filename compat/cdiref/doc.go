// Package cdiref holds no code of its own: its tests compare the dranode cdi
// module with the CDI reference implementation,
// tags.cncf.io/container-device-interface v1.1.1, which the cdi module must
// not depend on. It is a module outside go.work; run it with
//
//	cd compat/cdiref && GOWORK=off go test ./...
//
// What it checks:
//
//   - qualified names: the same accept/reject and the same parts as the
//     reference parser and validators, over every short string of an
//     adversarial alphabet, a hand-written table and a fuzz target
//     (FuzzParseDifferential);
//   - specs: JSON written by either side decodes to equal values on the
//     other; MinimumVersion agrees with MinimumRequiredVersion and Validate
//     errors exactly when the reference refuses to load the spec, over
//     thousands of generated specs;
//   - spec files written by cdi.SpecDir load in the reference Cache without
//     errors, and InjectDevices applies their edits to an OCI spec;
//   - benchmarks of both parsers side by side (BenchmarkParse).
package cdiref
