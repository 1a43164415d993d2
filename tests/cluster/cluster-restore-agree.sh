#!/bin/bash
# SPDX-License-Identifier: MIT
# Agreed restore across two daemons: a job of 4 ranks, 2 per node. A fresh
# job: every rank hears that there is nothing to restore. Rank 3's
# shard (node 1, not the leader) of the newest step is damaged: every rank,
# on both nodes, restores the same older step with the warning, and node 0
# (the coordinator) counts the bad step. Then a rank that never asks: the
# others fail with a timeout that names it, instead of waiting forever.
NODES=2
RANKS_PER_NODE=2
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-cluster.sh"

JOB=$ROOT/ca
DATA=(--job ca --seed 3 --tensors 4 --min-bytes 4K --max-bytes 1M)
AGREE=(--agree)
EXPECT_ERROR=(--expect-restore-error)
# An older ckpt-test-rank restores rank by rank and knows neither option.
"$CKPT_TEST_RANK" --help 2>&1 | grep -q -- '--agree' || AGREE=() EXPECT_ERROR=()

cluster_start
# Nothing committed yet: every rank, on either node, hears so at once (the
# round ends before any rank is told what to read). (An older ckpt-test-rank
# cannot expect an error: skipped, so that the agreement itself is shown.)
if [ ${#EXPECT_ERROR[@]} -gt 0 ]; then
	cluster_ranks fresh "0 1 2 3" "${DATA[@]}" --restore latest "${AGREE[@]}" \
		"${EXPECT_ERROR[@]}" --timeout-ms 90000
	for r in 0 1 2 3; do
		rank_wait "${CRANK_PID[$r]}" "fresh-$r"
		grep_log "fresh-$r" "(as expected)" || fail "rank $r: $(tail -n 1 "$T/fresh-$r.log")"
	done
fi
run_cluster_ranks save "${DATA[@]}" --steps 10,20,30 --wait --timeout-ms 90000
expect_committed "$JOB" "10 20 30"
SHARD=$(stepdir "$JOB" 30)/rank-000003.shard
b=$(od -An -tu1 -j 100 -N 1 "$SHARD" | tr -d ' ')
printf "$(printf '\\%03o' $((b ^ 0x5a)))" | dd of="$SHARD" bs=1 seek=100 conv=notrunc status=none
sync

log "agreed restore past rank 3's damaged shard of step 30"
cluster_ranks rs "0 1 2 3" "${DATA[@]}" --restore latest --expect-fallback "${AGREE[@]}" \
	--timeout-ms 90000
for r in 0 1 2 3; do
	wait "${CRANK_PID[$r]}" || true
	got[$r]=$(sed -n -e 's/.*restored step \([0-9]*\) ok.*/\1/p' \
		-e 's/.*expected a fallback warning, got none (step \([0-9]*\)).*/\1/p' "$T/rs-$r.log")
done
log "restored steps by rank: ${got[*]}"
for r in 0 1 2 3; do
	[ "${got[$r]}" = 20 ] || fail "rank $r restored step '${got[$r]}', every rank must restore 20 (ranks: ${got[*]})"
	grep_log "rs-$r" "step 30 not restored (rank 3" || fail "rank $r's warning does not name rank 3's step 30"
done
grep -q "step is damaged for the job" "$T/ckptd-n0.log" || fail "node 0 did not log the damaged step"
[ "$(metric 0 ckpt_restore_bad_steps_total ckpt_job=ca)" = 1 ] ||
	fail "node 0 counts $(metric 0 ckpt_restore_bad_steps_total ckpt_job=ca) bad steps, expected 1"

for k in 0 1; do
	ckptd_alive "n$k" || fail "ckptd of node $k died"
done
for k in 1 0; do
	ckptd_stop "n$k"
done

log "rank 3 never asks: the others time out"
CLUSTER_OPTS+=(--restore-agree-timeout-ms 3000)
cluster_start
cluster_ranks to "0 1 2" "${DATA[@]}" --restore latest "${AGREE[@]}" "${EXPECT_ERROR[@]}" \
	--timeout-ms 90000
for r in 0 1 2; do
	rank_wait "${CRANK_PID[$r]}" "to-$r"
	grep_log "to-$r" "timed out" || fail "rank $r did not fail with a timeout: $(tail -n 1 "$T/to-$r.log")"
done
grep -q "never asked for the agreed restore within 3000 ms (missing: 3)" "$T/ckptd-n0.log" ||
	fail "node 0 did not name the missing rank"
for k in 1 0; do
	ckptd_stop "n$k"
done
log "pass"
