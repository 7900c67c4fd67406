// Package cdi handles Container Device Interface (CDI) names, the cdi.k8s.io/
// annotations, CDI spec types and validation, and the per-claim transient spec
// files a DRA driver writes for the container runtime.
//
// It depends on the standard library and on package
// github.com/dranode/dranode/checkpoint/durable (standard library only),
// which does SpecDir's durable writes.
//
// # Qualified device names
//
// A runtime injects a device by its qualified name "vendor/class=name", for
// example "gpu.example.com/gpu=0". ParseQualifiedName splits and validates
// one without allocating; ValidateVendorName, ValidateClassName and
// ValidateDeviceName check single parts. The accepted language is exactly
// that of the CDI reference implementation (tags.cncf.io/container-device-
// interface v1.1.1, package parser), which the compat/cdiref module checks
// by a differential test and fuzzing:
//
//   - vendor and class: an ASCII letter, then ASCII letters, digits, '.',
//     '-' or '_', ending in a letter or digit (one letter is a valid vendor);
//   - device name: an ASCII letter or digit, then letters, digits, '.', '-',
//     '_' or ':', ending in a letter or digit.
//
// Errors are *NameError values naming the part and the character at fault.
//
// # Annotations
//
// Runtimes that do not take CDI device names from the CRI fields read them
// from container annotations "cdi.k8s.io/<driver>_<deviceID>" whose value is
// a comma-separated list of qualified names. AnnotationKey builds a key and
// rejects one whose name part is longer than 63 characters; that happens
// for a driver name of 27 or more characters and a claim UID.
// ClaimAnnotationKey is the documented way out: it uses the plain key when
// it fits, and otherwise the start of the driver name and ShortDeviceID, a
// hash of driver name and claim UID, which is stable across restarts and
// nodes and unique per claim. ParseAnnotations reads the devices back in a
// deterministic order without duplicates.
//
// # Specs
//
// Spec and the types it contains are the CDI spec file format, versions
// 0.3.0 to 1.1.0. Decoding is strict (unknown, miscased and repeated fields
// are errors, as they are for runtimes). MinimumVersion computes the oldest
// cdiVersion a spec can declare, and Validate applies the rules runtimes
// apply when they load a spec, reporting every problem with its path.
//
// # Transient spec files
//
// A DRA driver writes one spec per prepared claim, named
// "<vendor>-<class>_<claimUID>.json" (TransientSpecFileName), into the
// runtime's spec directory, and removes it when the claim is unprepared.
// SpecDir does the writing durably (temporary file, fsync, rename, fsync of
// the directory) with mode 0644, the removal (a missing file is fine),
// Lookup, which tells whether a claim's spec exists and where, and Sweep,
// which removes the driver's specs whose claims are no longer known after a
// crash, never touching other drivers' files. dranode's own per-claim specs
// use the class ClaimClass ("claim").
//
// Device names must be unique per vendor/class across all spec files in
// the directory, or the runtime refuses both; with one spec per claim,
// put the claim UID into the device names (as in
// "gpu.example.com/claim=<claimUID>-gpu-0").
package cdi
