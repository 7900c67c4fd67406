#!/usr/bin/env bash
# Builds the control-plane binaries that tests start through
# github.com/dranode/dranode/tools/envtest: etcd, kube-apiserver and
# kube-scheduler, from the versions pinned in build/controlplane (Kubernetes)
# and build/controlplane/etcd (etcd), fetched through the Go module proxy.
#
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/dranode/controlplane/<key>/ where
# <key> names the Kubernetes, etcd and Go versions (tools/envtest computes the
# same name). The cache lives outside the repository so a fresh clone reuses
# it. When the cache is complete and was built from the same go.mod/go.sum,
# the script exits at once.
#
# Environment:
#   DRANODE_CONTROLPLANE_BIN  a directory with prebuilt etcd, kube-apiserver and
#                             kube-scheduler; the script only checks it.
#   DRANODE_BUILD_PARALLEL    go build -p (default: number of CPUs, at most 2).
#
# Prints the binary directory on stdout; progress goes to stderr.
# "build-controlplane.sh --print-dir" only prints the directory, building nothing.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kmod="$repo/build/controlplane"
emod="$repo/build/controlplane/etcd"
binaries=(etcd kube-apiserver kube-scheduler)

log() { echo "build-controlplane: $*" >&2; }
die() { log "error: $*"; exit 1; }

check_dir() { # dir -> 0 when every binary is an executable file
	local b
	for b in "${binaries[@]}"; do
		[[ -f "$1/$b" && -x "$1/$b" ]] || return 1
	done
}

if [[ -n "${DRANODE_CONTROLPLANE_BIN:-}" ]]; then
	check_dir "$DRANODE_CONTROLPLANE_BIN" ||
		die "DRANODE_CONTROLPLANE_BIN=$DRANODE_CONTROLPLANE_BIN must hold executables ${binaries[*]}"
	echo "$DRANODE_CONTROLPLANE_BIN"
	exit 0
fi

# Versions come from the pinned go.mod files, not from a second list here.
modversion() { # go.mod module -> version from its require line
	sed -n "s|^[[:space:]]*\(require[[:space:]]\+\)\?$2[[:space:]]\+\(v[^[:space:]]*\).*|\2|p" "$1" | head -n1
}
kver="$(modversion "$kmod/go.mod" k8s.io/kubernetes)"
ever="$(modversion "$emod/go.mod" go.etcd.io/etcd/server/v3)"
[[ -n "$kver" ]] || die "no k8s.io/kubernetes requirement in $kmod/go.mod"
[[ -n "$ever" ]] || die "no go.etcd.io/etcd/server/v3 requirement in $emod/go.mod"
gover="$(GOWORK=off go -C "$kmod" env GOVERSION)" || die "go env GOVERSION failed"

# Keep in sync with CacheKey in tools/envtest; a test there checks it.
key="kubernetes-${kver}_etcd-${ever}_${gover}"
root="${XDG_CACHE_HOME:-$HOME/.cache}/dranode/controlplane"
out="$root/$key"
# The manifest records what the binaries were built from: a change to the
# pinned modules (a replace, a go.sum entry) rebuilds even at the same
# versions. (The script itself is left out: editing it should not cost a
# ten-minute rebuild.)
manifest="$(cd "$repo" && sha256sum build/controlplane/go.mod build/controlplane/go.sum \
	build/controlplane/etcd/go.mod build/controlplane/etcd/go.sum)"

if [[ "${1:-}" == --print-dir ]]; then # where the binaries are (or will be); no build
	echo "$out"
	exit 0
fi

cached() { check_dir "$out" && [[ -f "$out/MANIFEST" ]] && [[ "$(cat "$out/MANIFEST")" == "$manifest" ]]; }

if cached; then
	echo "$out"
	exit 0
fi

mkdir -p "$root"
exec 9>"$root/.lock"
if ! flock -n 9; then
	log "waiting for another build (lock $root/.lock)"
	flock 9
fi
if cached; then # another run built it while we waited
	echo "$out"
	exit 0
fi

# Holding the lock, any .build-* or .old-* directory is from a run that was
# killed before its trap ran.
rm -rf "$root"/.build-* "$root"/.old-*
tmp="$(mktemp -d "$root/.build-$key.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
par="${DRANODE_BUILD_PARALLEL:-$(($(nproc) < 2 ? $(nproc) : 2))}"
start=$SECONDS

log "building etcd $ever into $tmp (go build -p $par)"
(cd "$emod" && GOWORK=off go build -trimpath -p "$par" -ldflags "-s -w" \
	-o "$tmp/etcd" go.etcd.io/etcd/server/v3) || die "building etcd $ever failed"

# component-base/version reports what the binaries are; without these the
# apiserver calls itself v0.0.0-master.
minor="${kver#v1.}"
minor="${minor%%.*}"
ldk="-s -w -X k8s.io/component-base/version.gitVersion=$kver -X k8s.io/component-base/version.gitMajor=1"
ldk+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
for cmd in kube-apiserver kube-scheduler; do
	log "building $cmd $kver (go build -p $par)"
	(cd "$kmod" && GOWORK=off go build -trimpath -p "$par" -ldflags "$ldk" \
		-o "$tmp/$cmd" "k8s.io/kubernetes/cmd/$cmd") || die "building $cmd $kver failed"
done

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
log "built ${binaries[*]} into $out in $((SECONDS - start)) s"
echo "$out"
