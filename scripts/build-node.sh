#!/usr/bin/env bash
# Builds and gathers the binaries of a real Kubernetes node for tests that run
# one: the kubelet from the k8s.io/kubernetes pinned in build/node/kubelet
# (the same version as the control plane), containerd, its runc shim and ctr
# from the containerd pinned in build/node, all fetched through the Go module
# proxy; runc and the CNI plugins (bridge, loopback, host-local) from Debian's
# runc and containernetworking-plugins packages, installed with apt-get when
# missing (that needs root).
#
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/dranode/node/<key>/ where <key>
# names the Kubernetes, containerd and Go versions. It holds
#   kubelet containerd containerd-shim-runc-v2 ctr   built here
#   runc                                              symlink to Debian's
#   cni/bridge cni/loopback cni/host-local            symlinks to Debian's
#   node.env   NAME=value lines: where each binary is and its version
#   MANIFEST   hashes of the go.mod/go.sum files the binaries were built from
# The cache lives outside the repository so a fresh clone reuses it. When the
# directory is complete and current, the script exits at once; when only
# some built binaries are missing, it builds those alone. How the cache is
# built, locked and swapped in: scripts/lib/build.sh.
#
# Environment:
#   DRANODE_K8S             a Kubernetes minor of the version matrix (1.34):
#                           the kubelet from build/matrix/v<minor> (after that
#                           minor's control plane, whose compiles it shares),
#                           the rest as by default, into
#                           .../dranode/matrix/node/<key>/. Unset or the
#                           default minor: the default build.
#   DRANODE_NODE_BIN        a directory with the same layout (the binaries and
#                           cni/); the script only checks it.
#   DRANODE_BUILD_PARALLEL  go build -p (default: number of CPUs, at most 2).
#
# Prints the binary directory on stdout; progress goes to stderr.
# "build-node.sh --print-dir" only prints the directory, building nothing.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_name=build-node
# shellcheck source=lib/build.sh
source "$repo/scripts/lib/build.sh"

cmod="$repo/build/node"
kmod="$repo/build/node/kubelet"
minor="$(matrix_minor)"
if [[ -n "$minor" ]]; then
	kmod="$repo/build/matrix/v$minor"
fi
cni=(bridge loopback host-local)
debs=(runc containernetworking-plugins)
# The kubelet last: it waits for a control-plane build in progress, whose
# compiled packages it shares (cache_build_one); containerd needs nothing of
# it.
cache_built=(containerd containerd-shim-runc-v2 ctr kubelet)
# The symlinks to Debian's binaries are checked through: a removed package
# makes the cache incomplete and the next run installs it again.
cache_files=("${cache_built[@]}" runc "${cni[@]/#/cni/}")

use_prebuilt DRANODE_NODE_BIN "${cache_files[@]}"

kver="$(modversion "$kmod/go.mod" k8s.io/kubernetes)"
cver="$(modversion "$cmod/go.mod" github.com/containerd/containerd/v2)"
# The node must run the control plane's Kubernetes release, built from the
# same staging modules.
if [[ -z "$minor" ]]; then # a matrix minor's module holds both
	cpmod="$repo/build/controlplane/go.mod"
	cpver="$(modversion "$cpmod" k8s.io/kubernetes)"
	[[ "$cpver" == "$kver" ]] ||
		die "build/node/kubelet pins k8s.io/kubernetes $kver but build/controlplane pins $cpver: keep them equal"
	same_replaces_as_controlplane "$kmod/go.mod"
fi
gover="$(go_version "$kmod")"
par="$(build_parallel)"

key="kubernetes-${kver}_containerd-${cver}_${gover}"
root="$(matrix_root node)"
out="$root/$key"
# A change to the pinned modules (a replace, a go.sum entry) or to the
# kubelet's build flags rebuilds even at the same versions; the rest of the
# script is left out so editing it costs no rebuild.
manifest="$(cd "$repo" && sha256sum build/node/go.mod build/node/go.sum \
	build/node/kubelet/go.mod build/node/kubelet/go.sum; echo "$static_build_flags")"
if [[ -n "$minor" ]]; then
	manifest="$manifest
$(cd "$repo" && sha256sum "build/matrix/v$minor/go.mod" "build/matrix/v$minor/go.sum")"
fi

# pkgpath package name -> the path dpkg installed that ends in /name
pkgpath() { dpkg-query -L "$1" 2>/dev/null | grep -m1 "/$2\$" || true; }
debian_paths() { # -> 0 when every Debian binary is installed
	runc_path="$(pkgpath runc runc)"
	[[ -n "$runc_path" && -x "$runc_path" ]] || return 1
	local p
	cni_dir=
	for p in "${cni[@]}"; do
		p="$(pkgpath containernetworking-plugins "$p")"
		[[ -n "$p" && -x "$p" ]] || return 1
		cni_dir="$(dirname "$p")"
	done
}
debver() { dpkg-query -W -f '${Version}' "$1"; }

cache_prepare() {
	debian_paths && return
	command -v apt-get >/dev/null || die "runc and the CNI plugins come from Debian packages (${debs[*]}), and there is no apt-get here"
	[[ "$(id -u)" == 0 ]] || die "Debian packages ${debs[*]} are missing and installing them needs root: run 'apt-get install -y ${debs[*]}' as root, or set DRANODE_NODE_BIN"
	log "installing Debian packages ${debs[*]}"
	{ DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${debs[@]}"; } >&2 ||
		die "apt-get install ${debs[*]} failed"
	debian_paths || die "after installing ${debs[*]}, runc or a CNI plugin (${cni[*]}) is still missing"
}

# Every binary with the control plane's flags (go_build_static: no cgo,
# -trimpath), so that the build cache one build leaves serves the others for
# the packages they share (with cgo, package net and everything above it is
# a second compile: containerd and ctr with cgo compiled 5.5 MB of Go source
# more than without, the shim's packages included). containerd's tags as its
# Makefile gives them: no_btrfs (the btrfs snapshotter needs cgo and
# libbtrfs); the shim no_grpc (it speaks ttrpc). Without cgo, containerd
# reads users from /etc/passwd and resolves names in Go, as its static
# release does (osusergo, netgo), and has no PKCS#11 image decryption,
# which no test uses.
ldc="-s -w -X github.com/containerd/containerd/v2/version.Version=$cver"
cache_build_one() { # dir binary
	local tags="urfave_cli_no_docs no_btrfs"
	case "$2" in
	kubelet)
		# Built alongside the control plane, the two would compile their
		# shared packages twice: wait for a control-plane build in progress
		# (its lock), then build from the cache it left. None is started
		# from here: without one running, the kubelet is built at once.
		local cplock
		cplock="$(dirname "$("$repo/scripts/build-controlplane.sh" --print-dir)")/.lock"
		if [[ -e "$cplock" ]] && ! flock -n "$cplock" true; then
			log "waiting for the control plane's build (lock $cplock), whose compiled packages the kubelet shares"
			flock "$cplock" true
		fi
		log "building kubelet $kver (go build -p $par)"
		go_build_static "$kmod" -ldflags "$(kube_ldflags "$kver")" -o "$1/kubelet" k8s.io/kubernetes/cmd/kubelet ||
			die "building kubelet $kver failed"
		return
		;;
	containerd-shim-runc-v2) tags="urfave_cli_no_docs no_grpc" ;;
	esac
	log "building $2 $cver (go build -p $par)"
	go_build_static "$cmod" -tags "$tags" -ldflags "$ldc" -o "$1/$2" "github.com/containerd/containerd/v2/cmd/$2" ||
		die "building $2 $cver failed"
}

cache_finish() { # dir
	ln -s "$runc_path" "$1/runc"
	mkdir "$1/cni"
	local p b
	for p in "${cni[@]}"; do
		ln -s "$cni_dir/$p" "$1/cni/$p"
	done
	{
		echo "KUBERNETES_VERSION=$kver"
		echo "CONTAINERD_VERSION=$cver"
		echo "RUNC_DEB_VERSION=$(debver runc)"
		echo "CNI_PLUGINS_DEB_VERSION=$(debver containernetworking-plugins)"
		for b in "${cache_built[@]}"; do
			echo "$(echo "$b" | tr a-z- A-Z_)=$out/$b"
		done
		echo "RUNC=$runc_path"
		echo "CNI_BIN_DIR=$cni_dir"
	} >"$1/node.env"
	log "runc $(debver runc) and CNI plugins $(debver containernetworking-plugins) from Debian"
}

cache_main "$root" "$key" "$manifest" "$@"
