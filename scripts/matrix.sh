#!/usr/bin/env bash
# The version matrix: compat/node's real-node scenarios against each
# supported Kubernetes minor's kube-apiserver, kube-scheduler,
# kube-controller-manager and kubelet, plus the allowed skew (the newest API
# server with the oldest kubelet). Each minor's binaries are built from the
# module proxy by scripts/build-controlplane.sh and scripts/build-node.sh
# with DRANODE_K8S=<minor> (build/matrix/v<minor>; the newest minor is the
# default build), cached outside the repository; the scenarios get them
# through DRANODE_CONTROLPLANE_BIN and DRANODE_NODE_BIN.
#
# Usage: scripts/matrix.sh [COLUMN...]
#   COLUMN  a minor (1.34) or a skew pair <apiserver>/<kubelet> (1.37/1.34);
#           default: every minor of build/matrix, the default one, and the
#           newest API server with the oldest kubelet.
# Environment:
#   MATRIX_RUN      go test -run pattern of the scenarios (default: all)
#   MATRIX_TIMEOUT  go test -timeout per column (default 90m)
#   MATRIX_OUT      directory for each column's go test log and the table
#                   (default: a new temporary directory)
#
# Prints a Markdown table, scenario × column → pass/FAIL/skip, with the
# commit and date, for COMPATIBILITY.md; progress goes to stderr. A column
# whose binaries do not build has "build failed" in every row. Exits 1 when
# any scenario failed. Not part of make check: each minor's cold build is
# about as long as the default control plane's and node's together
# (COMPATIBILITY.md).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_name=matrix
# shellcheck source=lib/build.sh
source "$repo/scripts/lib/build.sh"

def="$(modversion "$repo/build/controlplane/go.mod" k8s.io/kubernetes)"
def="${def#v}"
def="${def%.*}"
minors=()
for d in "$repo"/build/matrix/v*/; do
	d="${d%/}"
	minors+=("${d##*/v}")
done
minors+=("$def")

columns=("$@")
if ((${#columns[@]} == 0)); then
	columns=("${minors[@]}" "$def/${minors[0]}")
fi

out="${MATRIX_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/dranode-matrix.XXXXXX")}"
mkdir -p "$out"
log "logs in $out"

# binaries KIND MINOR -> the directory of KIND's binaries for MINOR (built
# when missing); fails when the build does.
binaries() {
	DRANODE_K8S="$2" "$repo/scripts/build-$1.sh" 2>>"$out/build.log"
}

declare -A result # "<scenario> <column>" -> pass/FAIL/skip
scenarios=()
failed=0
for col in "${columns[@]}"; do
	api="${col%/*}"
	kubelet="${col#*/}"
	file="$out/$(echo "$col" | tr / _).json"
	log "column $col: API server, scheduler and controller manager $api, kubelet $kubelet: building (log $out/build.log)"
	if ! cp="$(binaries controlplane "$api")" || ! node="$(binaries node "$kubelet")"; then
		log "column $col: build failed"
		result["build $col"]="build failed"
		failed=1
		continue
	fi
	log "column $col: running compat/node (control plane $cp, node $node; log $file)"
	(cd "$repo/compat/node" &&
		DRANODE_CONTROLPLANE_BIN="$cp" DRANODE_NODE_BIN="$node" GOWORK=off \
			go test -count=1 -json -timeout "${MATRIX_TIMEOUT:-90m}" -run "${MATRIX_RUN:-.}" . >"$file" 2>&1) || failed=1
	# go test -json: one line per event; the top-level tests' verdicts.
	while IFS=' ' read -r action test; do
		[[ " ${scenarios[*]} " == *" $test "* ]] || scenarios+=("$test")
		result["$test $col"]="$action"
	done < <(sed -n 's/.*"Action":"\(pass\|fail\|skip\)".*"Test":"\([A-Za-z0-9_]*\)".*/\1 \2/p' "$file")
done

commit="$(git -C "$repo" rev-parse --short HEAD)"
[[ -z "$(git -C "$repo" status --porcelain)" ]] || commit="$commit (with uncommitted changes)"
{
	echo "Commit $commit, $(date -u +%Y-%m-%d), $(go env GOVERSION), $(nproc) CPUs."
	echo
	printf '| scenario |'
	for col in "${columns[@]}"; do
		if [[ "$col" == */* ]]; then
			printf ' API %s, kubelet %s |' "${col%/*}" "${col#*/}"
		else
			printf ' %s |' "$col"
		fi
	done
	echo
	printf '|---|'
	for _ in "${columns[@]}"; do printf -- '---|'; done
	echo
	((${#scenarios[@]} > 0)) || scenarios=("(none ran)")
	for test in "${scenarios[@]}"; do
		printf '| `%s` |' "$test"
		for col in "${columns[@]}"; do
			v="${result["$test $col"]:-${result["build $col"]:-not run}}"
			case "$v" in fail) v=FAIL ;; esac
			printf ' %s |' "$v"
		done
		echo
	done
} | tee "$out/table.md"
exit "$failed"
