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
//	release prepare SET                  require SET's modules at its version in every go.mod;
//	                                     the chart's versions and plugin SHA-256; release notes
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
//     values.yaml image.tag; and, for every plugin the image ships (gpu,
//     loop: chartPlugins in chart.go, which must name exactly the chart's
//     drivers), a real SHA-256, never missing or all zeros, which "prepare"
//     writes from a build made as "make image" makes it;
//   - every module of the repository (but the fixtures under testdata) has
//     a licence its users receive: its own LICENSE, else the root's, which
//     the go command puts in the zip of a module in a subdirectory
//     (cmd/go/internal/modfetch/coderepo.go; "proxy" does the same). The
//     licence is read with github.com/google/licensecheck, pkg.go.dev's
//     scanner, at pkg.go.dev's threshold (75% of the words), and the
//     module's README names it in a "## Licence" section; a released module
//     has a README;
//   - every released module has release notes (RELEASE-NOTES.md in its
//     directory, so in its zip) with a section for its set's version.
//
// "prepare" writes each released module's section of RELEASE-NOTES.md for
// the set's version, newest version first, the older sections kept: for a
// module tagged before, the API changes gorelease finds against its last
// tag below the version (run only when a file other than go.mod and go.sum
// changed since that tag, in a commit or the working tree), its changed
// direct requirements, and the commits that touched its directory since
// the tag ("git log <tag>..HEAD -- <dir>", nested modules and the notes
// left out); for a first release, how many commits made it and its
// importable packages with their synopses. The section is regenerated
// whole, so a second "prepare" changes nothing; edit highlights in after
// the last "prepare", before tagging.
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
