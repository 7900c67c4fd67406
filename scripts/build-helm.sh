#!/usr/bin/env bash
# Builds helm, the version the chart is tested with, from the build module
# build/helm (helm.sh/helm/v3 pinned, fetched through the Go module proxy; no
# binary downloads are reachable) and prints the binary's path.
#
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/dranode/helm/helm-<version>_<go>/helm
# with a MANIFEST of the go.mod/go.sum hashes it was built from. The cache,
# its lock and the swap are scripts/lib/build.sh's, as for the control plane
# and the node.
#
# build/helm resolves helm's Kubernetes libraries (k8s.io/api, client-go,
# kubectl, …) to the control plane's versions, and helm is built with the
# control plane's flags, so that on an empty cache it compiles only its own
# packages: the other four fifths of its source are the control plane's
# compiled packages (build/helm/README.md has the figures).
#
# Used by the agent's chart tests, integration and compat/node, which deploys
# the chart onto a real node.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_name=build-helm
# shellcheck source=lib/build.sh
source "$repo/scripts/lib/build.sh"

hmod="$repo/build/helm"
cache_built=(helm)
cache_files=(helm)

version="$(modversion "$hmod/go.mod" helm.sh/helm/v3)"
same_replaces_as_controlplane "$hmod/go.mod"
gover="$(go_version "$hmod")"
par="$(build_parallel)"

cache_build_one() { # dir binary
	log "building helm $version (go build -p $par)"
	# The control plane's flags: the same compiled packages serve both.
	go_build_static "$hmod" -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version" \
		-o "$1/helm" helm.sh/helm/v3/cmd/helm || die "building helm $version failed"
}

key="helm-${version}_${gover}"
manifest="$(cd "$repo" && sha256sum build/helm/go.mod build/helm/go.sum; echo "$static_build_flags")"

dir="$(cache_main "${XDG_CACHE_HOME:-$HOME/.cache}/dranode/helm" "$key" "$manifest" "$@")"
if [[ "${1:-}" == --print-dir ]]; then
	echo "$dir"
else
	echo "$dir/helm"
fi
