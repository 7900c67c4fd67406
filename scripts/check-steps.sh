#!/usr/bin/env bash
# check-steps.sh runs make check's steps and prints how long each took.
#
#   scripts/check-steps.sh SERIAL_STEP... -- PARALLEL_STEP...
#
# The serial steps (those that write files the others read: generate-check)
# run one by one, in order, their output streamed. The parallel steps (the
# control-plane build, the lint checks, one step per module's tests) then
# run CHECK_JOBS at a time, in the order
# given (slowest first, so that the last to start are short): most modules'
# tests wait on processes, fsync or the network for a good part of their
# time, so one at a time left a core idle, and two at a time still left
# a sixth of both cores' time unused (1,760 CPU-s in a 1,047-s check);
# three keep them busy. Each parallel step's output goes to a log and is printed whole when
# the step ends, so that two steps' lines never interleave.
#
# Each step runs with TMPDIR set to a directory of its own,
# /tmp/dc.XXXXXX, and the check fails, naming the step and the files, on
# whatever a step leaves in it; the directory is removed when the step
# ends (never into a mount a killed test left). One directory per step, so
# that a leftover names its step (with one for all, a CI run that failed
# on one file could only say that some step left it, and the list itself
# scrolled out of the tail CI shows: it is repeated last). Only the steps'
# own files are judged: other programs on the machine write to /tmp
# meanwhile (a fresh clone's check that passed every step once failed on
# an unrelated program's files), and what a step changes on the host
# outside TMPDIR is judged by the tests that hold the host lock
# (tools/envtest/hostlock). In /tmp whatever the caller's TMPDIR, with a
# short name: compat/e2e's agent sockets with a pod UID as instance ID are
# 86 bytes plus TMPDIR's length (100 here), and sun_path holds 107.
# compat/node's nodes live in /tmp itself (compat/node/harness,
# nodeDirRoot), with one byte to spare.
#
# A failed step stops new steps from starting; the ones running finish (a
# killed test could leave the host changed), then the script fails naming
# every failed step. The times go to CHECK_TIMES and are printed at the end,
# slowest first, also on failure.
#
# Environment: MAKE (default make), CHECK_JOBS (default 3), CHECK_TIMES
# (default .run/check-times), CHECK_LOGS (default .run/check-logs).
set -uo pipefail

MAKE=${MAKE:-make}
jobs=${CHECK_JOBS:-3}
times=${CHECK_TIMES:-.run/check-times}
logs=${CHECK_LOGS:-.run/check-logs}
case $jobs in '' | *[!0-9]* | 0)
	echo "check-steps: CHECK_JOBS=$jobs: want a number of steps at once, at least 1" >&2
	exit 2
	;;
esac

serial=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do serial+=("$1"); shift; done
[ $# -gt 0 ] && shift
parallel=("$@")

declare -A tmp_of
# step_tmp STEP: makes STEP's TMPDIR, mode 1777 as /tmp's: mktemp makes it
# 0700, and a test that runs a binary as another user (agent/cmd/
# dranode-agent's config validate as nobody) could not reach what it put
# there ("fork/exec: permission denied").
step_tmp() {
	local dir
	dir=$(mktemp -d /tmp/dc.XXXXXX) && chmod 1777 "$dir" || exit 2
	tmp_of[$1]=$dir
}
# judge_tmp STEP: after STEP ended, records what it left in its TMPDIR
# and removes the directory.
judge_tmp() {
	local dir=${tmp_of[$1]} left
	left=$(find "$dir" -mindepth 1 -maxdepth 2 -printf '%P\n' | sort)
	if [ -n "$left" ]; then
		leaked+=("$1")
		{
			echo "==> $1 left these in its TMPDIR $dir (a test must remove what it makes; run the step's tests with TMPDIR set to an empty directory to find which):"
			echo "$left" | head -n 40 | sed 's/^/    /'
		} >>"$logs/tmp-leftovers"
	fi
	remove_tmp "$dir"
	unset "tmp_of[$1]"
}
remove_tmp() {
	rm -rf --one-file-system "$1" 2>/dev/null ||
		echo "==> could not remove all of $1 (a mount a killed test left?); remove it by hand" >&2
}
trap 'for dir in "${tmp_of[@]}"; do remove_tmp "$dir"; done' EXIT

mkdir -p "$(dirname "$times")" "$logs"
: >"$times"
: >"$logs/tmp-leftovers"
begin=$(date +%s)
failed=()
leaked=()

# cpu_seconds FILE: the children's user+sys seconds from the output of
# bash's times (its second line, "XmY.YYYs XmY.YYYs"), rounded.
cpu_seconds() {
	sed -n 2p "$1" 2>/dev/null | awk '{
		t = 0
		for (i = 1; i <= 2; i++) { split($i, p, "m"); sub("s", "", p[2]); t += p[1] * 60 + p[2] }
		printf "%d", t + 0.5
	}'
}

report() {
	echo "==> check took $(($(date +%s) - begin))s (CHECK_JOBS=$jobs); by step, slowest first (wall; CPU: user+sys of every process the step waited for; when it started, seconds into the check):"
	sort -k2 -n -r "$times" | awk '{ printf "    %5ds  %5s  +%-5s  %s\n", $2, ($3 == "" ? "" : $3 "s"), $4, $1 }'
	if [ ${#failed[@]} -gt 0 ] || [ ${#leaked[@]} -gt 0 ]; then
		# Repeated last: other steps' logs may have followed the failure.
		for step in "${failed[@]}"; do
			[ -f "$logs/${step//\//_}.log" ] || continue
			echo "==> the end of $step's log ($logs/${step//\//_}.log):"
			tail -n 60 "$logs/${step//\//_}.log"
		done
		cat "$logs/tmp-leftovers"
		echo "==> check FAILED in: ${failed[*]}${leaked[*]:+${failed[*]:+; }TMPDIR leftovers of ${leaked[*]}}"
		exit 1
	fi
}

for step in "${serial[@]}"; do
	start=$(date +%s)
	step_tmp "$step"
	(
		export TMPDIR=${tmp_of[$step]}
		$MAKE --no-print-directory "$step"
		rc=$?
		times >"$logs/${step//\//_}.cpu"
		exit $rc
	)
	rc=$?
	echo "$step $(($(date +%s) - start)) $(cpu_seconds "$logs/${step//\//_}.cpu") $((start - begin))" >>"$times"
	judge_tmp "$step"
	if [ $rc -ne 0 ]; then
		failed+=("$step")
		report
	fi
done

declare -A step_of start_of
running=0
# finish waits for one running step, prints its log and records it.
finish() {
	local pid rc step
	wait -n -p pid
	rc=$?
	step=${step_of[$pid]}
	unset "step_of[$pid]"
	running=$((running - 1))
	echo "$step $(($(date +%s) - start_of[$step])) $(cpu_seconds "$logs/${step//\//_}.cpu") $((start_of[$step] - begin))" >>"$times"
	echo "==> $step: $([ $rc -eq 0 ] && echo passed || echo "FAILED (exit $rc)") after $(($(date +%s) - start_of[$step]))s"
	cat "$logs/${step//\//_}.log"
	judge_tmp "$step"
	[ $rc -eq 0 ] || failed+=("$step")
}

for step in "${parallel[@]}"; do
	[ ${#failed[@]} -eq 0 ] || break
	while [ $running -ge "$jobs" ]; do finish; done
	[ ${#failed[@]} -eq 0 ] || break
	echo "==> start $step"
	start_of[$step]=$(date +%s)
	step_tmp "$step"
	(
		export TMPDIR=${tmp_of[$step]}
		$MAKE --no-print-directory "$step" >"$logs/${step//\//_}.log" 2>&1
		rc=$?
		times >"$logs/${step//\//_}.cpu"
		exit $rc
	) &
	step_of[$!]=$step
	running=$((running + 1))
done
while [ $running -gt 0 ]; do finish; done
report
