# shellcheck shell=bash
# Sourced by scripts/build-controlplane.sh and scripts/build-node.sh: what both
# do to build binaries from pinned Go modules into a cache directory outside
# the repository, so a fresh clone reuses it and nothing is built twice.
#
# The caller sets build_name (the log prefix) before sourcing, then:
#   use_prebuilt VAR FILE...   if $VAR is set, check it and print it (exit)
#   modversion, go_version, kube_ldflags, build_parallel, go_build_static,
#   same_replaces_as_controlplane   helpers
#   cache_main ROOT KEY MANIFEST "$@"   the cache itself (below)
#
# A cache entry ROOT/KEY is complete when every file in cache_files is an
# executable file (symlinks are followed) and its MANIFEST equals MANIFEST (the
# hashes of what the binaries were built from). cache_main
#   - with --print-dir prints ROOT/KEY and builds nothing;
#   - prints ROOT/KEY at once when the entry is complete;
#   - else takes a flock on ROOT/.lock (a concurrent run waits and then finds
#     the entry complete), builds into a temporary directory ROOT/.build-KEY.*
#     and renames it into place whole, so a reader sees the old complete entry
#     or the new one, never a half-built one. When the old entry's MANIFEST is
#     current, the binaries it still holds are reused (hard links) and only
#     the missing ones are built: a cache made before a binary joined the
#     list gains that binary without rebuilding the others.
# Hooks the caller defines:
#   cache_build_one DIR NAME   build NAME (one of cache_built) into DIR
#   cache_prepare              optional; under the lock, before building
#   cache_finish DIR           optional; add the files that are not built
#                              (symlinks, env files) to DIR
# and the arrays cache_built (binaries built by cache_build_one) and
# cache_files (every file a complete entry holds, cache_built included).

log() { echo "${build_name:-build}: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# missing_files DIR FILE... -> prints each FILE that is not an executable file
# in DIR (symlinks are followed), one a line
missing_files() {
	local dir=$1 f
	shift
	for f in "$@"; do
		[[ -f "$dir/$f" && -x "$dir/$f" ]] || echo "$f"
	done
}

# use_prebuilt VAR FILE... -> when $VAR is set: it must hold every FILE as an
# executable; print it and exit 0, or fail naming what is missing.
use_prebuilt() {
	local var=$1 dir missing
	shift
	dir="${!var:-}"
	[[ -n "$dir" ]] || return 0
	[[ -d "$dir" ]] || die "$var=$dir is not a directory (it must hold executables $*)"
	missing="$(missing_files "$dir" "$@" | tr '\n' ' ')"
	[[ -z "$missing" ]] || die "$var=$dir lacks executable ${missing% } (it must hold $*; unset $var to build them)"
	echo "$dir"
	exit 0
}

# modversion GOMOD MODULE -> the version of MODULE in GOMOD's require lines;
# fails the script when there is none. Versions come from the pinned go.mod
# files, not from a second list in a script.
modversion() {
	local v
	v="$(sed -n "s|^[[:space:]]*\(require[[:space:]]\+\)\?$2[[:space:]]\+\(v[^[:space:]]*\).*|\2|p" "$1" | head -n1)"
	[[ -n "$v" ]] || die "no $2 requirement in $1"
	echo "$v"
}

# matrix_minor -> the Kubernetes minor $DRANODE_K8S selects for the version
# matrix ("1.34"; a leading "v" is accepted), or nothing for the default
# build (the control plane's pinned version, also when DRANODE_K8S names
# it). A minor other than the default must have its build module,
# build/matrix/v<minor>, which pins its k8s.io/kubernetes release; its
# binaries go to a cache root of their own (matrix_root), so that building
# one never waits for, or replaces, the default cache entries tests use.
matrix_minor() {
	local want="${DRANODE_K8S:-}" def
	want="${want#v}"
	[[ -n "$want" ]] || return 0
	def="$(modversion "$repo/build/controlplane/go.mod" k8s.io/kubernetes)"
	def="${def#v}"
	[[ "$want" == "${def%.*}" ]] && return 0
	[[ "$want" =~ ^1\.[0-9]+$ ]] || die "DRANODE_K8S=$DRANODE_K8S is not a Kubernetes minor such as 1.34"
	[[ -f "$repo/build/matrix/v$want/go.mod" ]] ||
		die "DRANODE_K8S=$DRANODE_K8S: no build module build/matrix/v$want (the matrix has: $(cd "$repo/build/matrix" && echo v*) and ${def%.*})"
	echo "$want"
}

# matrix_root KIND -> the cache root of KIND (controlplane, node) for
# DRANODE_K8S's minor: dranode/KIND for the default version, else
# dranode/matrix/KIND.
matrix_root() {
	local base="${XDG_CACHE_HOME:-$HOME/.cache}/dranode"
	if [[ -n "$(matrix_minor)" ]]; then
		echo "$base/matrix/$1"
	else
		echo "$base/$1"
	fi
}

# go_version MODDIR -> the Go version that builds MODDIR (it may differ from
# the go on PATH through a toolchain line).
go_version() {
	GOWORK=off go -C "$1" env GOVERSION || die "go env GOVERSION in $1 failed"
}

# kube_ldflags VERSION -> linker flags for a Kubernetes command:
# component-base/version reports what the binary is; without them it calls
# itself v0.0.0-master. Every Kubernetes binary the project builds uses the
# same flags, so the Go build cache one build leaves serves the others.
kube_ldflags() {
	local minor="${1#v1.}"
	minor="${minor%%.*}"
	echo "-s -w -X k8s.io/component-base/version.gitVersion=$1 -X k8s.io/component-base/version.gitMajor=1" \
		"-X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
}

# build_parallel -> go build -p: $DRANODE_BUILD_PARALLEL, else the number of
# CPUs, at most 2 (building kube-controller-manager peaked at 2.9 GB resident
# here).
build_parallel() {
	echo "${DRANODE_BUILD_PARALLEL:-$(($(nproc) < 2 ? $(nproc) : 2))}"
}

# same_replaces_as_controlplane GOMOD -> fails the script unless GOMOD's
# replace block is build/controlplane/go.mod's: the staging modules at the
# control plane's versions, so that the modules built with it (the kubelet,
# helm) share its compiled packages.
same_replaces_as_controlplane() {
	local replaces='/^replace[[:space:]]*(/,/^)/p' cp="$repo/build/controlplane/go.mod"
	[[ "$(sed -n "$replaces" "$1")" == "$(sed -n "$replaces" "$cp")" ]] ||
		die "the replace block of ${1#"$repo/"} differs from build/controlplane/go.mod's: keep them equal"
}

# go_build_static MODDIR ARGS... -> go build ARGS in MODDIR, the workspace
# off, with -trimpath and without cgo: how every Kubernetes, etcd and helm
# binary is built here. Without cgo because their releases are built so (the
# kubelet too since Kubernetes v1.36, kubernetes/kubernetes#135870), and
# because the images and the binaries tests build are: with cgo, package net
# and every package above it (client-go, gRPC, most of Kubernetes) are a
# second compile, which cost an empty cache about 26 MB of Go source.
# static_build_flags goes into each cache entry's MANIFEST, so that a change
# of these flags rebuilds.
static_build_flags="CGO_ENABLED=0 go build -trimpath"
go_build_static() {
	local dir=$1
	shift
	(cd "$dir" && CGO_ENABLED=0 GOWORK=off go build -trimpath -p "$(build_parallel)" "$@")
}

cache_main() {
	local root=$1 key=$2 manifest=$3
	shift 3
	local out="$root/$key"
	if [[ "${1:-}" == --print-dir ]]; then # where the binaries are (or will be); no build
		echo "$out"
		exit 0
	fi
	if cache_complete "$out" "$manifest"; then
		echo "$out"
		exit 0
	fi

	mkdir -p "$root"
	exec 9>"$root/.lock"
	if ! flock -n 9; then
		log "waiting for another build (lock $root/.lock)"
		flock 9
	fi
	if cache_complete "$out" "$manifest"; then # another run built it while we waited
		echo "$out"
		exit 0
	fi
	local start=$SECONDS

	# Holding the lock, any .build-* or .old-* directory is from a run that
	# was killed before its trap ran.
	rm -rf "$root"/.build-* "$root"/.old-*
	if declare -F cache_prepare >/dev/null; then
		cache_prepare
	fi
	cache_tmp="$(mktemp -d "$root/.build-$key.XXXXXX")"
	trap 'rm -rf "$cache_tmp"' EXIT

	# Binaries built from the same inputs are as good as new ones.
	local reuse=() build=() b
	for b in "${cache_built[@]}"; do
		if manifest_current "$out" "$manifest" && [[ -z "$(missing_files "$out" "$b")" ]] &&
			{ ln "$out/$b" "$cache_tmp/$b" 2>/dev/null || cp -p "$out/$b" "$cache_tmp/$b"; }; then
			reuse+=("$b")
		else
			build+=("$b")
		fi
	done
	if ((${#reuse[@]} > 0)); then
		log "reusing ${reuse[*]} from $out (built from the same go.mod/go.sum); building ${build[*]:-nothing}"
	fi
	for b in "${build[@]}"; do
		cache_build_one "$cache_tmp" "$b"
	done
	if declare -F cache_finish >/dev/null; then
		cache_finish "$cache_tmp"
	fi
	local missing
	missing="$(missing_files "$cache_tmp" "${cache_files[@]}" | tr '\n' ' ')"
	[[ -z "$missing" ]] || die "the build left no executable ${missing% } in $cache_tmp"

	printf '%s\n' "$manifest" >"$cache_tmp/MANIFEST"
	chmod 0755 "$cache_tmp"
	# Swap in whole: readers see the old complete directory or the new one.
	if [[ -e "$out" ]]; then
		local old
		old="$(mktemp -d "$root/.old-$key.XXXXXX")"
		mv "$out" "$old/"
		mv "$cache_tmp" "$out"
		rm -rf "$old"
	else
		mv "$cache_tmp" "$out"
	fi
	trap - EXIT
	log "built ${build[*]:-nothing} into $out in $((SECONDS - start)) s"
	echo "$out"
}

manifest_current() { [[ -f "$1/MANIFEST" && "$(cat "$1/MANIFEST")" == "$2" ]]; }

# cache_complete DIR MANIFEST -> 0 when DIR holds every file of cache_files
# and was built from MANIFEST.
cache_complete() {
	[[ -z "$(missing_files "$1" "${cache_files[@]}")" ]] && manifest_current "$1" "$2"
}
