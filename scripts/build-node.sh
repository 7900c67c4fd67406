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
# directory is complete and current, the script exits at once.
#
# Environment:
#   DRANODE_NODE_BIN        a directory with the same layout (the binaries and
#                           cni/); the script only checks it.
#   DRANODE_BUILD_PARALLEL  go build -p (default: number of CPUs, at most 2).
#
# Prints the binary directory on stdout; progress goes to stderr.
# "build-node.sh --print-dir" only prints the directory, building nothing.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cmod="$repo/build/node"
kmod="$repo/build/node/kubelet"
built=(kubelet containerd containerd-shim-runc-v2 ctr)
cni=(bridge loopback host-local)
debs=(runc containernetworking-plugins)

log() { echo "build-node: $*" >&2; }
die() { log "error: $*"; exit 1; }

check_dir() { # dir -> 0 when every binary is an executable file
	local b
	for b in "${built[@]}" runc "${cni[@]/#/cni/}"; do
		[[ -f "$1/$b" && -x "$1/$b" ]] || return 1
	done
}

if [[ -n "${DRANODE_NODE_BIN:-}" ]]; then
	check_dir "$DRANODE_NODE_BIN" ||
		die "DRANODE_NODE_BIN=$DRANODE_NODE_BIN must hold executables ${built[*]} runc and cni/{${cni[*]}}"
	echo "$DRANODE_NODE_BIN"
	exit 0
fi

# Versions come from the pinned go.mod files, not from a second list here.
modversion() { # go.mod module -> version from its require line
	sed -n "s|^[[:space:]]*\(require[[:space:]]\+\)\?$2[[:space:]]\+\(v[^[:space:]]*\).*|\2|p" "$1" | head -n1
}
kver="$(modversion "$kmod/go.mod" k8s.io/kubernetes)"
cver="$(modversion "$cmod/go.mod" github.com/containerd/containerd/v2)"
[[ -n "$kver" ]] || die "no k8s.io/kubernetes requirement in $kmod/go.mod"
[[ -n "$cver" ]] || die "no github.com/containerd/containerd/v2 requirement in $cmod/go.mod"
# The node must run the control plane's Kubernetes release, built from the
# same staging modules.
cpmod="$repo/build/controlplane/go.mod"
[[ "$(modversion "$cpmod" k8s.io/kubernetes)" == "$kver" ]] ||
	die "build/node/kubelet pins k8s.io/kubernetes $kver but build/controlplane pins $(modversion "$cpmod" k8s.io/kubernetes): keep them equal"
replaces() { sed -n '/^replace[[:space:]]*(/,/^)/p' "$1"; }
[[ "$(replaces "$kmod/go.mod")" == "$(replaces "$cpmod")" ]] ||
	die "the replace block of build/node/kubelet/go.mod differs from build/controlplane/go.mod's: keep them equal"
gover="$(GOWORK=off go -C "$kmod" env GOVERSION)" || die "go env GOVERSION failed"

key="kubernetes-${kver}_containerd-${cver}_${gover}"
root="${XDG_CACHE_HOME:-$HOME/.cache}/dranode/node"
out="$root/$key"
# A change to the pinned modules (a replace, a go.sum entry) rebuilds even at
# the same versions; the script itself is left out so editing it costs no
# rebuild.
manifest="$(cd "$repo" && sha256sum build/node/go.mod build/node/go.sum \
	build/node/kubelet/go.mod build/node/kubelet/go.sum)"

if [[ "${1:-}" == --print-dir ]]; then # where the binaries are (or will be); no build
	echo "$out"
	exit 0
fi

# The symlinks to Debian's binaries are checked through: a removed package
# makes the cache incomplete and the next run installs it again.
cached() { check_dir "$out" && [[ -f "$out/MANIFEST" ]] && [[ "$(cat "$out/MANIFEST")" == "$manifest" ]]; }

if cached; then
	echo "$out"
	exit 0
fi

mkdir -p "$root"
start=$SECONDS
exec 9>"$root/.lock"
if ! flock -n 9; then
	log "waiting for another build (lock $root/.lock)"
	flock 9
fi
if cached; then # another run built it while we waited
	echo "$out"
	exit 0
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
if ! debian_paths; then
	command -v apt-get >/dev/null || die "runc and the CNI plugins come from Debian packages (${debs[*]}), and there is no apt-get here"
	[[ "$(id -u)" == 0 ]] || die "Debian packages ${debs[*]} are missing and installing them needs root: run 'apt-get install -y ${debs[*]}' as root, or set DRANODE_NODE_BIN"
	log "installing Debian packages ${debs[*]}"
	{ DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${debs[@]}"; } >&2 ||
		die "apt-get install ${debs[*]} failed"
	debian_paths || die "after installing ${debs[*]}, runc or a CNI plugin (${cni[*]}) is still missing"
fi
debver() { dpkg-query -W -f '${Version}' "$1"; }

# Holding the lock, any .build-* or .old-* directory is from a run that was
# killed before its trap ran.
rm -rf "$root"/.build-* "$root"/.old-*
tmp="$(mktemp -d "$root/.build-$key.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
par="${DRANODE_BUILD_PARALLEL:-$(($(nproc) < 2 ? $(nproc) : 2))}"

# component-base/version reports what the kubelet is; without these it calls
# itself v0.0.0-master. Same flags as the control plane's, so the build cache
# it left is reused for the packages they share.
minor="${kver#v1.}"
minor="${minor%%.*}"
ldk="-s -w -X k8s.io/component-base/version.gitVersion=$kver -X k8s.io/component-base/version.gitMajor=1"
ldk+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
log "building kubelet $kver (go build -p $par)"
(cd "$kmod" && GOWORK=off go build -trimpath -p "$par" -ldflags "$ldk" \
	-o "$tmp/kubelet" k8s.io/kubernetes/cmd/kubelet) || die "building kubelet $kver failed"

# As containerd's Makefile builds them: no_btrfs because the btrfs snapshotter
# needs cgo and libbtrfs headers; the shim static, without cgo, and no_grpc
# (it speaks ttrpc).
ldc="-s -w -X github.com/containerd/containerd/v2/version.Version=$cver"
for cmd in containerd ctr; do
	log "building $cmd $cver (go build -p $par)"
	(cd "$cmod" && GOWORK=off go build -trimpath -p "$par" -tags "urfave_cli_no_docs no_btrfs" -ldflags "$ldc" \
		-o "$tmp/$cmd" "github.com/containerd/containerd/v2/cmd/$cmd") || die "building $cmd $cver failed"
done
log "building containerd-shim-runc-v2 $cver (go build -p $par)"
(cd "$cmod" && CGO_ENABLED=0 GOWORK=off go build -trimpath -p "$par" -tags "urfave_cli_no_docs no_grpc" -ldflags "$ldc" \
	-o "$tmp/containerd-shim-runc-v2" github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2) ||
	die "building containerd-shim-runc-v2 $cver failed"

ln -s "$runc_path" "$tmp/runc"
mkdir "$tmp/cni"
for p in "${cni[@]}"; do
	ln -s "$cni_dir/$p" "$tmp/cni/$p"
done
{
	echo "KUBERNETES_VERSION=$kver"
	echo "CONTAINERD_VERSION=$cver"
	echo "RUNC_DEB_VERSION=$(debver runc)"
	echo "CNI_PLUGINS_DEB_VERSION=$(debver containernetworking-plugins)"
	for b in "${built[@]}"; do
		echo "$(echo "$b" | tr a-z- A-Z_)=$out/$b"
	done
	echo "RUNC=$runc_path"
	echo "CNI_BIN_DIR=$cni_dir"
} >"$tmp/node.env"
printf '%s\n' "$manifest" >"$tmp/MANIFEST"
chmod 0755 "$tmp"
# Swap in whole: readers see the old complete directory or the new one.
if [[ -e "$out" ]]; then
	old="$(mktemp -d "$root/.old-$key.XXXXXX")"
	mv "$out" "$old/"
	mv "$tmp" "$out"
	rm -rf "$old"
else
	mv "$tmp" "$out"
fi
trap - EXIT
log "built ${built[*]} into $out in $((SECONDS - start)) s (runc $(debver runc), CNI plugins $(debver containernetworking-plugins) from Debian)"
echo "$out"
