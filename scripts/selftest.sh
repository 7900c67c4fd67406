#!/usr/bin/env bash
# selftest.sh — proves that the repository's own checks catch what they
# claim to: modcheck fails on a module missing from versions.yaml, on a bad
# version and on two modules requiring different versions of a dependency;
# tag.sh refuses a version that disagrees with versions.yaml and a dirty
# tree, and creates MODULE/VERSION otherwise. Each case runs in a throwaway
# copy of the repository, never in the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0

fresh() {
	rm -rf "$work/repo"
	git clone -q "$root" "$work/repo"
	# Carry uncommitted changes to the files under test, so the self test
	# checks the scripts as they are now, not as last committed.
	cp "$root/scripts/modcheck/main.go" "$work/repo/scripts/modcheck/main.go"
	cp "$root/scripts/tag.sh" "$work/repo/scripts/tag.sh"
	cp "$root/versions.yaml" "$root/go.work" "$work/repo/"
	git -C "$work/repo" -c user.name=selftest -c user.email=selftest@example.invalid commit -qam "selftest base" >/dev/null || true
}

expect() { # expect pass|fail DESCRIPTION PATTERN COMMAND...
	local want="$1" what="$2" pattern="$3"
	shift 3
	local out rc=0
	out="$(cd "$work/repo" && "$@" 2>&1)" || rc=$?
	if [[ "$want" == pass && $rc -ne 0 ]] || [[ "$want" == fail && $rc -eq 0 ]] || ! grep -q -- "$pattern" <<<"$out"; then
		echo "FAIL: $what (exit $rc, want $want, output should match '$pattern'):"
		sed 's/^/    /' <<<"$out"
		failures=$((failures + 1))
	else
		echo "ok:   $what"
	fi
}

modcheck() { GOWORK=off go run scripts/modcheck/main.go; }

fresh
expect pass "modcheck accepts the repository as it is" "agree" modcheck

fresh
sed -i '/^  tools:/d' "$work/repo/versions.yaml"
expect fail "modcheck: module in go.work without a version" 'module "tools" (in go.work) has no version' modcheck

fresh
sed -i 's/^  cdi: .*/  cdi: 1.0/' "$work/repo/versions.yaml"
expect fail "modcheck: malformed version" 'module "cdi": version "1.0"' modcheck

fresh
echo "  ghost: v0.1.0" >>"$work/repo/versions.yaml"
expect fail "modcheck: version for a module not in go.work" 'module "ghost" is not used by go.work' modcheck

fresh
(cd "$work/repo/examples" && GOWORK=off go mod edit -require=example.com/dep@v1.0.0)
(cd "$work/repo/tools" && GOWORK=off go mod edit -require=example.com/dep@v1.1.0)
expect fail "modcheck: two modules require different versions" "example.com/dep is required at different versions: v1.0.0 by examples; v1.1.0 by tools" modcheck

fresh
version="$(sed -n 's/^  cdi:[[:space:]]*\([^[:space:]#]*\).*/\1/p' "$work/repo/versions.yaml")"
expect fail "tag: version disagreeing with versions.yaml" "versions.yaml says cdi is $version" scripts/tag.sh cdi v9.9.9
expect fail "tag: unknown module" "not a module directory" scripts/tag.sh nosuchmodule v0.1.0
echo dirt >"$work/repo/dirt"
expect fail "tag: dirty tree" "not clean" scripts/tag.sh cdi "$version"
rm "$work/repo/dirt"
expect pass "tag: creates MODULE/VERSION" "tagged cdi/$version" \
	env GIT_COMMITTER_NAME=selftest GIT_COMMITTER_EMAIL=selftest@example.invalid scripts/tag.sh cdi "$version"
expect pass "tag: the tag exists afterwards" "cdi/$version" git tag --list "cdi/$version"
expect fail "tag: refuses an existing tag" "already exists" scripts/tag.sh cdi "$version"
nested="$(awk '$1 == "tools/envtest:" { print $2 }' "$work/repo/versions.yaml")"
expect pass "tag: a nested module gets a nested tag" "tagged tools/envtest/$nested" \
	env GIT_COMMITTER_NAME=selftest GIT_COMMITTER_EMAIL=selftest@example.invalid scripts/tag.sh tools/envtest "$nested"

if [[ $failures -gt 0 ]]; then
	echo "selftest: $failures failure(s)"
	exit 1
fi
echo "selftest: all repository checks behave"
