#!/bin/bash
# SPDX-License-Identifier: MIT
# One rank's shard of the newest step is damaged: an agreed restore gives
# every rank of the job the same older step, with the warning on every
# rank, a log line and a metric (not rank 1 at step 10 and the others at
# step 20, as per-rank restores would).
. "$(dirname "$0")/../integration/lib.sh"

ROOT=$T/root
JOB=$ROOT/ag
WORLD=3
OPTS=(--socket "$(sock d)" --job ag --seed 7 --tensors 4 --min-bytes 64K --max-bytes 1M)
# A ckpt-test-rank without --agree (an older build) restores rank by rank:
# the only way such a build has to restore a job.
AGREE=(--agree)
"$CKPT_TEST_RANK" --help 2>&1 | grep -q -- '--agree' || AGREE=()
ckptd_start d "$ROOT" --keep-last 0
run_ranks $WORLD save "${OPTS[@]}" --steps 10,20,30 --wait
expect_committed "$JOB" "10 20 30"

# Flip a byte inside the first tensor of rank 1's shard of step 30 and of
# rank 2's shard of step 20: only step 10 restores on every rank.
flip() {
	local f=$1 off=100 b
	b=$(od -An -tu1 -j $off -N 1 "$f" | tr -d ' ')
	printf "$(printf '\\%03o' $((b ^ 0x5a)))" | dd of="$f" bs=1 seek=$off conv=notrunc status=none
}
flip "$(stepdir "$JOB" 30)/rank-000001.shard"
flip "$(stepdir "$JOB" 20)/rank-000002.shard"
sync

declare -a pids=()
for r in $(seq 0 $((WORLD - 1))); do
	rank_start restore-$r "${OPTS[@]}" --rank $r --world $WORLD --restore latest --expect-fallback "${AGREE[@]}"
	pids+=("$LAST_PID")
done
for r in $(seq 0 $((WORLD - 1))); do
	wait "${pids[$r]}" || true
done
for r in $(seq 0 $((WORLD - 1))); do
	step=$(sed -n -e 's/.*restored step \([0-9]*\) ok.*/\1/p' \
		-e 's/.*expected a fallback warning, got none (step \([0-9]*\)).*/\1/p' "$T/restore-$r.log")
	log "rank $r restored step '${step:-none}'"
	steps[$r]=$step
done
for r in $(seq 0 $((WORLD - 1))); do
	[ "${steps[$r]}" = 10 ] ||
		fail "rank $r restored step '${steps[$r]}', every rank must restore step 10 (ranks: ${steps[*]})"
	grep_log restore-$r "fell back to step 10" || fail "rank $r printed no warning"
	grep_log restore-$r "step 30 not restored" || fail "rank $r's warning does not name step 30"
	grep_log restore-$r "step 20 not restored" || fail "rank $r's warning does not name step 20"
done
grep -q "step is damaged for the job" "$T/ckptd-d.log" || fail "ckptd did not log the damaged step"
m=$(curl -s "http://127.0.0.1:$(metrics_port d)/metrics" |
	sed -n 's/^ckpt_restore_bad_steps_total{ckpt_job="ag"} \([0-9]*\).*/\1/p')
[ "$m" = 2 ] || fail "ckpt_restore_bad_steps_total is '$m', expected 2"

ckptd_alive d || fail "ckptd died"
ckptd_stop d
log "pass"
