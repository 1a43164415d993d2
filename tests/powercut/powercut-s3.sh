#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Power cuts during S3 adoption: ckptd's root is on ckpt-powerfs, its S3 tier
# a real RADOS Gateway. Steps are committed and uploaded; then, cycle after
# cycle, the job's directory is lost (or left as the last cut left it), ckptd
# restores the newest step from S3 for both ranks (fetching the files into
# the root and committing the step there again) and the power fails at a
# random point of that. After kill -9 and the revert: every committed step in
# the root verifies, LATEST names a committed step, and the next restore
# gets the newest step, byte for byte (from the root or S3 again).
#
#   powercut-s3.sh [--cuts N] [--seed S]      (default 12 cuts)
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-powercut.sh"
: "${CKPT_S3_HARNESS:?CKPT_S3_HARNESS must name the tests/s3 directory}"
. "$(dirname "$0")/../s3tier/lib-s3.sh"

CUTS=12
SEED=$(( $(date +%s%N) % 1000000007 ))
while [ $# -gt 0 ]; do
	case $1 in
	--cuts) CUTS=$2; shift 2 ;;
	--seed) SEED=$2; shift 2 ;;
	*) echo "usage: $0 [--cuts N] [--seed S]" >&2; exit 2 ;;
	esac
done
RANDOM=$SEED
log "seed $SEED (rerun: $0 --seed $SEED --cuts $CUTS)"

rgw_up
pfs_start fs
ROOT=$T/fs/root
JOB=ad
JOBDIR=$ROOT/$JOB
mkdir "$ROOT"
fsync_paths "$T/fs"
OPTS=(--job "$JOB" --seed 13 --tensors 3 --min-bytes 64K --max-bytes 1M --timeout-ms 30000)
S3=(--s3-url "s3://$S3_BUCKET/pc" --s3-part-size 5MiB --s3-keep-last 0 --keep-last 0)
STEPS=(10 20 30)
NEWEST=30

start_d() {
	local sock=$T/d.sock i
	rm -f "$sock"
	"$CKPTD" --config '' --root "$ROOT" --socket "$sock" --log-level debug \
		--metrics-listen 127.0.0.1:0 "${S3[@]}" >>"$T/ckptd-d.log" 2>&1 &
	CKPTD_PID[d]=$!
	for i in $(seq 1 400); do
		[ -S "$sock" ] && return 0
		kill -0 "${CKPTD_PID[d]}" 2>/dev/null || { unset "CKPTD_PID[d]"; return 1; }
		sleep 0.025
	done
	return 1
}

start_d || fail "ckptd did not start"
run_ranks 2 save --socket "$T/d.sock" "${OPTS[@]}" --steps "$(IFS=,; echo "${STEPS[*]}")" --wait
for s in "${STEPS[@]}"; do
	wait_s3 120 s3_has "$(s3_step_key pc "$JOB" "$s" MANIFEST.json)" || fail "step $s never reached S3"
done
ckptd_stop d

n_cuts=0 n_checked=0 n_corrupt=0 n_latest_bad=0 n_restores=0 n_adopted=0 n_wiped=0
declare -a PIDS=()
declare -A CUT_AT=()

# start_restores: both ranks restore latest (must be step NEWEST), in the
# background, pids in PIDS; wait_restores: both must exit 0.
start_restores() {
	local r
	PIDS=()
	for r in 0 1; do
		"$CKPT_TEST_RANK" --socket "$T/d.sock" "${OPTS[@]}" --rank "$r" --world 2 \
			--restore latest --expect-step "$NEWEST" >"$T/restore-$r.log" 2>&1 &
		PIDS+=("$!")
	done
}
wait_restores() {
	local p rc=0
	for p in "${PIDS[@]}"; do wait "$p" || rc=1; done
	PIDS=()
	return $rc
}

while [ "$n_cuts" -lt "$CUTS" ]; do
	if [ $((RANDOM % 3)) -ne 0 ] || [ "$n_cuts" -eq 0 ]; then
		# The job's directory is lost: the restore adopts from S3.
		rm -rf "${JOBDIR:?}"
		fsync_paths "$ROOT"
		n_wiped=$((n_wiped + 1))
	fi
	# Mostly armed (an adoption of both ranks is about 340 file
	# operations), else a timed cut.
	if [ $((RANDOM % 4)) -ne 0 ]; then
		pfs_ctl fs arm $((RANDOM % 360 + 1)) >/dev/null
	fi
	if start_d; then
		start_restores
		sleep "$(printf '0.%03d' $((RANDOM % 600)))"
	fi
	pfs_ctl fs cut >/dev/null
	n_cuts=$((n_cuts + 1))
	at=$(pfs_stat fs cut_at)
	CUT_AT[$at]=$(( ${CUT_AT[$at]:-0} + 1 ))
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; { wait "$p"; } 2>/dev/null; done
	[ -n "${CKPTD_PID[d]:-}" ] && { kill -9 "${CKPTD_PID[d]}"; { wait "${CKPTD_PID[d]}"; } 2>/dev/null; unset "CKPTD_PID[d]"; }
	PIDS=()
	pfs_ctl fs revert >/dev/null

	# The durable state.
	steps=$(committed_steps "$JOBDIR" 2>/dev/null | tr '\n' ' ')
	for s in $steps; do
		n_checked=$((n_checked + 1))
		timeout 60 "$CKPT_INSPECT" --verify --quiet --no-progress "$(stepdir "$JOBDIR" "$s")" >"$T/inspect.log" 2>&1 ||
			{ n_corrupt=$((n_corrupt + 1)); fail "after cut $n_cuts step $s is committed in the root but does not verify: $(head -n 3 "$T/inspect.log")"; }
	done
	if [ -e "$JOBDIR/LATEST" ]; then
		latest=$(tr -d ' \n' <"$JOBDIR/LATEST")
		[[ $latest =~ ^[0-9]+$ ]] && [ -f "$(stepdir "$JOBDIR" $((10#$latest)))/MANIFEST.json" ] ||
			{ n_latest_bad=$((n_latest_bad + 1)); fail "after cut $n_cuts LATEST says '$latest', not a committed step (committed: $steps)"; }
	fi
	# A restore with the power on gets the newest step again.
	m0=$(pfs_stat fs mutating)
	start_d || fail "ckptd did not start after cut $n_cuts"
	start_restores
	wait_restores || fail "after cut $n_cuts the restore of step $NEWEST failed: $(cat "$T"/restore-*.log | head -n 4)"
	n_restores=$((n_restores + 1))
	ckptd_stop d
	log "cut $n_cuts at $at; committed after it: ${steps:-none}; the restore after it: $(( $(pfs_stat fs mutating) - m0 )) file operations"
done
n_adopted=$(grep -c "committed again from S3 job=$JOB" "$T/ckptd-d.log")
pfs_stop fs
points=$(for k in "${!CUT_AT[@]}"; do echo "$k ${CUT_AT[$k]}"; done | sort -k2,2nr | tr '\n' ',' | sed 's/,$//; s/,/, /g')
log "powercut-s3: cuts $n_cuts (job directory lost before $n_wiped), steps committed again from S3 $n_adopted, checked steps $n_checked, restores after a cut $n_restores, corrupt visible $n_corrupt, bad LATEST $n_latest_bad, seed $SEED"
log "cut points: $points"
log "pass"
