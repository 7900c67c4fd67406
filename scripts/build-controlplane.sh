#!/usr/bin/env bash
# Builds the control-plane binaries that tests start through
# github.com/dranode/dranode/tools/envtest: etcd, kube-apiserver,
# kube-scheduler and kube-controller-manager, from the versions pinned in
# build/controlplane (one module for both, so that they share their
# dependencies' versions and compiles), fetched through the Go module proxy.
#
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/dranode/controlplane/<key>/ where
# <key> names the Kubernetes, etcd and Go versions (tools/envtest computes the
# same name), with a MANIFEST of the go.mod/go.sum hashes the binaries were
# built from. The cache lives outside the repository so a fresh clone reuses
# it. When the directory holds every binary and its MANIFEST is current, the
# script exits at once; when only some binaries are missing (a cache from
# before kube-controller-manager joined) it builds those alone. How the cache
# is built, locked and swapped in: scripts/lib/build.sh.
#
# Environment:
#   DRANODE_K8S               a Kubernetes minor of the version matrix (1.34):
#                             kube-apiserver, kube-scheduler and
#                             kube-controller-manager from build/matrix/v<minor>
#                             into .../dranode/matrix/controlplane/<key>/, with
#                             the default build's etcd (built first if needed).
#                             Unset or the default minor: the default build.
#   DRANODE_CONTROLPLANE_BIN  a directory with prebuilt etcd, kube-apiserver,
#                             kube-scheduler and kube-controller-manager; the
#                             script only checks it.
#   DRANODE_BUILD_PARALLEL    go build -p (default: number of CPUs, at most 2).
#
# Prints the binary directory on stdout; progress goes to stderr.
# "build-controlplane.sh --print-dir" only prints the directory, building nothing.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_name=build-controlplane
# shellcheck source=lib/build.sh
source "$repo/scripts/lib/build.sh"

kmod="$repo/build/controlplane"
emod="$kmod" # etcd's module
minor="$(matrix_minor)"
if [[ -n "$minor" ]]; then
	kmod="$repo/build/matrix/v$minor"
fi
kcmds=(kube-apiserver kube-scheduler kube-controller-manager)
cache_built=(etcd "${kcmds[@]}")
if [[ -n "$minor" ]]; then
	cache_built=("${kcmds[@]}" etcd) # etcd may wait for the default build
fi
cache_files=("${cache_built[@]}")

use_prebuilt DRANODE_CONTROLPLANE_BIN "${cache_files[@]}"

kver="$(modversion "$kmod/go.mod" k8s.io/kubernetes)"
ever="$(modversion "$emod/go.mod" go.etcd.io/etcd/server/v3)"
gover="$(go_version "$kmod")"
par="$(build_parallel)"
ldk="$(kube_ldflags "$kver")"

cache_build_one() { # dir binary
	if [[ "$2" == etcd && -n "$minor" ]]; then
		# The default build's etcd: its version does not follow Kubernetes'
		# minor, and building it at another's dependency versions would be a
		# second compile of everything it shares with Kubernetes.
		local def
		def="$(DRANODE_K8S= "$repo/scripts/build-controlplane.sh")" || die "building the default control plane for its etcd failed"
		cp -p "$def/etcd" "$1/etcd"
		return
	fi
	if [[ "$2" == etcd ]]; then
		log "building etcd $ever (go build -p $par)"
		go_build_static "$kmod" -ldflags "-s -w" -o "$1/etcd" go.etcd.io/etcd/server/v3 ||
			die "building etcd $ever failed"
		return
	fi
	log "building $2 $kver (go build -p $par)"
	go_build_static "$kmod" -ldflags "$ldk" -o "$1/$2" "k8s.io/kubernetes/cmd/$2" ||
		die "building $2 $kver failed"
}

# Keep in sync with CacheKey in tools/envtest; a test there checks it.
key="kubernetes-${kver}_etcd-${ever}_${gover}"
# The manifest records what the binaries were built from: a change to the
# pinned modules (a replace, a go.sum entry) or to the build flags rebuilds
# even at the same versions. (The rest of the script is left out: editing
# it should not cost a rebuild.)
manifest="$(cd "$repo" && sha256sum build/controlplane/go.mod build/controlplane/go.sum; echo "$static_build_flags")"
if [[ -n "$minor" ]]; then
	manifest="$manifest
$(cd "$repo" && sha256sum "build/matrix/v$minor/go.mod" "build/matrix/v$minor/go.sum")"
fi

cache_main "$(matrix_root controlplane)" "$key" "$manifest" "$@"
