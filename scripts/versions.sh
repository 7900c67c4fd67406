#!/usr/bin/env bash
# versions.sh keeps one version of every dependency the modules compile.
#
#   scripts/versions.sh check    fail, naming each module and dependency,
#                                where a module builds a dependency at another
#                                version than the rest
#   scripts/versions.sh align    raise those requirements (go mod edit) and tidy,
#                                until check passes
#
# Why: every module builds and tests alone (GOWORK=off), so each resolves its
# own versions. Where two modules build, say, k8s.io/api at two versions, the
# Go build cache holds two compiles of it and of everything above it, with
# and without the race detector: on an empty cache, before this check, a
# third of what make check compiled for its race tests was such a second
# variant (compat/e2e, compat/drabench and compat/kubelet pinned
# Kubernetes v1.37.1 while the rest used v0.37.2: 87 MB of Go source to
# compile with -race across the modules, 51 MB once aligned).
#
# "The rest" is the version the modules agree on together: the one a
# workspace over all of them selects (the highest any of them requires).
# Only modules that provide a compiled package count (go list -deps -test),
# so a requirement that only shapes the module graph is left alone. The
# release tool's check asks the stricter question for the released modules
# (the same require line in every workspace go.mod, what a vendor reads);
# this one covers every tested module, compat and tool modules included.
#
# Left out: scripts/release (gorelease's own x/tools and x/mod decide what
# the API check reports) and compat/cdiref (the upstream CDI reference, kept
# at the versions upstream's own module selects). build/* are not tested
# modules; the control-plane and node builds have their own pins.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode=${1:-check}
case $mode in check | align) ;; *)
	echo "usage: scripts/versions.sh check|align" >&2
	exit 2
	;;
esac

excluded=" compat/cdiref scripts/release "
modules=()
for m in $(make -s -C "$repo" list-modules); do
	[[ $excluded == *" $m "* ]] || modules+=("$m")
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fmt='{{with .Module}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}'

# agreed writes "path version" for every module the workspace over all
# modules selects.
agreed() {
	{
		echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/').0"
		echo "use ("
		printf '\t%s\n' "${modules[@]/#/$repo/}"
		echo ")"
	} >"$work/go.work"
	(cd "$work" && GOWORK="$work/go.work" go list -m -f '{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}' all) |
		awk 'NF == 2' | sort >"$work/agreed"
}

# differing MODULE writes "path its-version agreed-version" for each
# dependency MODULE compiles at a version other than the agreed one.
differing() {
	(cd "$repo/$1" && GOWORK=off go list -deps -test -f "$fmt" ./...) | awk 'NF == 2' | sort -u |
		join - "$work/agreed" | awk '$2 != $3'
}

for round in 1 2 3 4 5; do
	agreed
	bad=0
	for m in "${modules[@]}"; do
		# A requirement raised in a module another one replaces (integration
		# uses examples/piecemeal-driver's directory) leaves the other's
		# go.mod behind: tidy it before asking what it builds.
		[ "$mode" = check ] || (cd "$repo/$m" && GOWORK=off go mod tidy)
		diffs="$(differing "$m")"
		[ -n "$diffs" ] || continue
		bad=1
		if [ "$mode" = check ]; then
			echo "$m builds dependencies at versions the other modules do not (module, its version, theirs):" >&2
			sed 's/^/  /' <<<"$diffs" >&2
			continue
		fi
		echo "versions: $m: $(awk '{ printf "%s@%s ", $1, $3 }' <<<"$diffs")" >&2
		# go mod edit rather than go get: go get refuses to leave a go.mod
		# that needs tidying, which raising an indirect requirement can.
		# shellcheck disable=SC2046
		(cd "$repo/$m" && go mod edit $(awk '{ print "-require=" $1 "@" $3 }' <<<"$diffs") && GOWORK=off go mod tidy)
	done
	if [ $bad = 0 ]; then
		exit 0
	fi
	if [ "$mode" = check ]; then
		echo "run scripts/versions.sh align (or give the modules above the same requirement)" >&2
		exit 1
	fi
done
echo "versions: still differing after 5 rounds of align" >&2
exit 1
