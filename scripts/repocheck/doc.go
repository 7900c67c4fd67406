// Command repocheck checks what no module of the repository owns.
//
// Usage, from anywhere in the repository (-C selects another root; the
// Makefile's docs-check target runs it in make check):
//
//	repocheck docs    README.md and DESIGN.md against the code
//
// "docs" fails, naming the file, the line and what to change, when:
//
//   - README.md's or DESIGN.md's module table misses a module: every
//     directory with a go.mod (outside testdata and hidden directories) —
//     go.work's modules, compat/*, build/*, build/*/*, scripts/* — must be
//     named in the table by a link to its directory or, in the first
//     column, by its directory in backticks (`compat/node`). A module
//     table is a Markdown table whose first header cell is "module"; a
//     first-column entry that is no module (and no pattern like
//     `compat/*`) is reported too;
//   - a relative link of either file points to nothing, or its #fragment
//     names no heading of the Markdown file linked (as GitHub makes anchors);
//   - either file names, in backticks, code of this repository that does
//     not exist. A name is checked when its first part is one of the
//     repository's packages, by name or by directory (`claimcache.RecordPrepared`,
//     `checkpoint/durable.WriteFile`, `claimcache.Cache.LockClaim`), or one
//     of its types (`Cache.LockClaim`: a method or field of a type Cache of
//     any package), or when it is a test (`TestRollingUpgradeNoFailedCalls`,
//     `TestScript*` for a prefix). A package's unexported names
//     (`slices.dryRunDir` is a configuration key) and names of other
//     projects (`kubeletplugin.RollingUpdate`, `DRAPlugin.WatchHealthStatus`)
//     are not checked, nor is a bare name (`WithClaim`): write
//     `Cache.WithClaim` for the check to hold it.
//
// The code is read with go/parser from every .go file of the repository,
// tests included; nothing is built and nothing is fetched.
package main
