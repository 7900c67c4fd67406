// Package cdi handles Container Device Interface (CDI) names, the cdi.k8s.io/
// annotations, CDI spec types and validation, and the per-claim transient spec
// files a DRA driver writes for the container runtime.
//
// It depends on the standard library only.
package cdi
