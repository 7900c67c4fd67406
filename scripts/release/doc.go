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
// Usage, from anywhere in the repository (-C selects another root):
//
//	release check              the rules below; each problem names the fix
//	release prepare SET        require the set's modules at its version everywhere
//	release tag SET            tag <dir>/<version> for the set, siblings first
//	release proxy DIR          a GOPROXY=file://DIR directory from the release tags
//	release consumers DIR      fresh modules get, import and build each release
//	release apicheck [MODULE]  gorelease against the last release tag
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
//   - a released module requires no unreleased sibling.
//
// A release: bump the set's version in versions.yaml, run "prepare", commit,
// run "tag", push the tags. The commit tagged therefore never requires a
// sibling at a pseudo-version, which its users could not resolve.
//
// "consumers" runs each go command as a user outside the repository: GOWORK
// off, a scratch module cache, GOPROXY chained as the release proxy, the
// developer's module cache, then the configured proxies (never "direct"),
// GOFLAGS=-mod=mod -trimpath (so that the shared build cache is reused
// whatever the scratch cache's path), and GONOSUMDB for this repository's
// modules, which the checksum database has never seen; everything else is
// verified against it as usual.
package main
