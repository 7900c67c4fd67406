#!/usr/bin/env bash
# tag.sh MODULE VERSION — create the release tag MODULE/VERSION (e.g.
# cdi/v0.1.0) for one module, as Go expects for a module in a subdirectory.
#
# Refuses when the version does not match versions.yaml (the file is the
# record of what was released), when the tree is not clean, or when the tag
# already exists. Pushing the tag is left to the person releasing.
set -euo pipefail
cd "$(dirname "$0")/.."

module="${1:-}"
version="${2:-}"
if [[ -z "$module" || -z "$version" ]]; then
	echo "usage: make tag MODULE=<dir> VERSION=vX.Y.Z" >&2
	exit 2
fi
if [[ ! -f "$module/go.mod" ]]; then
	echo "tag: $module is not a module directory (no $module/go.mod)" >&2
	exit 2
fi
listed="$(awk -v m="$module" '$1 == m":" { print $2; exit }' versions.yaml)"
if [[ -z "$listed" ]]; then
	echo "tag: module $module is not listed in versions.yaml" >&2
	exit 1
fi
if [[ "$listed" != "$version" ]]; then
	echo "tag: versions.yaml says $module is $listed, not $version; update versions.yaml first" >&2
	exit 1
fi
if [[ -n "$(git status --porcelain)" ]]; then
	echo "tag: the working tree is not clean; commit or stash first" >&2
	exit 1
fi
tag="$module/$version"
if git rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
	echo "tag: $tag already exists" >&2
	exit 1
fi
git tag -a "$tag" -m "$module $version"
echo "tagged $tag at $(git rev-parse --short HEAD)"
