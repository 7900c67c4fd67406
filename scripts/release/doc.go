// Command release releases dranode's library modules so that a vendor can
// "go get" them one by one, the way opentelemetry-go's multimod does: the
// modules are grouped in module sets in versions.yaml, each set released at
// one version.
//
//	module-sets:
//	  dranode:
//	    version: v0.1.0
//	    modules: [cdi, checkpoint, ...]
//	excluded-modules: [examples, tools, ...]
//
// Usage, from anywhere in the repository (-C selects another root; the
// Makefile's release-* targets run it):
//
//	release check                        the rules below; each problem names the fix
//	release prepare SET                  require SET's modules at its version in every go.mod
//	release tag SET                      tag <dir>/<version> for SET at HEAD, siblings first
//	release proxy DIR                    a GOPROXY=file://DIR directory from the release tags
//	release consumers [-app DIR]... DIR  each release used alone by a fresh module
//	release apicheck [MODULE...]         gorelease against each module's last release tag
//
// The rules "check" enforces:
//
//   - every module go.work uses is in exactly one module set or in
//     excluded-modules, and versions.yaml names no other module. Modules
//     outside go.work (compat/*, build/*, this tool, modules under testdata)
//     are never released and are not listed;
//   - set versions are canonical semantic versions, v0 or v1 (the module
//     paths have no /vN suffix);
//   - no two workspace modules require different versions of one
//     third-party module;
//   - every module of the repository that requires a released sibling
//     requires exactly the version versions.yaml gives it, never a
//     pseudo-version, and every sibling requirement has a replace to the
//     sibling's relative directory for development;
//   - a released module requires no unreleased sibling;
//   - the Helm chart (examples/deploy/chart/dranode) carries the version of
//     the agent's set: Chart.yaml version (without "v") and appVersion,
//     values.yaml image.tag; and a real SHA-256 for its example plugin,
//     which "prepare" writes from a build made as "make image" makes it.
//
// A release: bump the set's version in versions.yaml, run "prepare", commit,
// run "tag", push the tags. The commit tagged therefore never requires a
// sibling at a pseudo-version, which its users could not resolve.
//
// "consumers" runs each go command as a user outside the repository: GOWORK
// off, a scratch module cache (a reused one would hide a changed release of
// the same version), GOPROXY chained as the release proxy, the developer's
// module cache, then the configured proxies without "direct", and
// GOFLAGS=-mod=mod -trimpath (-trimpath keeps the shared build cache useful
// whatever the scratch cache's path). The checksum database is reachable
// through the configured proxy, so it verifies every third-party module as
// usual; GONOSUMDB exempts only this repository's modules, whose scratch
// releases it has never seen. For each released module the consumer runs go
// get, imports every non-internal, non-main package, go mod tidy (which
// resolves the whole module graph, tests of dependencies included), go build,
// and fails if go list -m all names an unreleased module of this repository
// or k8s.io/kubernetes. Each -app module is copied from the tagged commit,
// its replace directives removed, tidied, built and vetted.
//
// "apicheck" runs the gorelease this module pins (tool directive, built by
// "go tool", which keeps the executable in the build cache) on a staged copy
// of each module: gorelease loads the release without replace directives and
// requires the module's go.sum to hold every sum, neither of which a module
// developed with replace directives satisfies, so the working tree is zipped
// as the proxy would, its directory replaces dropped and tidied against a
// proxy of the release tags plus the set's untagged versions, for the
// modules checked and the released siblings they require. gorelease accepts
// any change for a v0 module; the policy is applied here: an incompatible
// change needs a minor bump while the major version is v0, a major bump
// after.
package main
