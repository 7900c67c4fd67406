#!/usr/bin/env bash
# Builds helm, the version the chart is tested with, from the Go module proxy
# (no binary downloads are reachable) into
# ${XDG_CACHE_HOME:-$HOME/.cache}/dranode/helm-<version>/helm, once, under a
# lock so that parallel test binaries build it once. Prints the binary's path.
#
# Used by the agent's chart tests and by compat/node, which deploys the chart
# onto a real node.
set -euo pipefail

version=v3.21.4
dir="${XDG_CACHE_HOME:-$HOME/.cache}/dranode/helm-$version"
bin="$dir/helm"
if [[ -x "$bin" ]]; then
	echo "$bin"
	exit 0
fi
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if [[ ! -x "$bin" ]]; then
	tmp="$(mktemp -d "$dir/build-XXXXXX")"
	trap 'rm -rf "$tmp"' EXIT
	echo "build-helm: building helm $version into $dir (once; a few minutes)" >&2
	(cd "$tmp" && GOWORK=off GOFLAGS= GOBIN="$tmp" go install -p 1 "helm.sh/helm/v3/cmd/helm@$version") >&2
	mv "$tmp/helm" "$bin"
fi
echo "$bin"
