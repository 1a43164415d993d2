#!/bin/bash
# SPDX-License-Identifier: MIT
# The leader (node 0) is lost mid-step: every other node fails its open
# steps ("node 0 lost") and tells its ranks, nothing gets a manifest while
# there is no leader, the other daemons keep serving restores of what is
# committed, and once a node 0 is back (a fresh daemon) the group commits
# again. Also a late joiner: node 2 starts after nodes 0 and 1 are up.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-cluster.sh"

JOB=$ROOT/ll
DATA=(--job ll --seed 12 --tensors 6 --min-bytes 64K --max-bytes 8M)

log "nodes 0 and 1 start; node 2 joins later"
node_start 0
node_start 1
sleep 1
node_start 2
cluster_wait_whole 30

log "step 1 commits on all 6 ranks"
run_cluster_ranks s1 "${DATA[@]}" --steps 1 --wait --timeout-ms 120000
expect_committed "$JOB" 1

log "step 2 in flight; rank 5 (node 2) held back, so it cannot commit"
cluster_ranks s2 "1 2 3 4" "${DATA[@]}" --steps 2 --expect-fail 2 --timeout-ms 120000
cluster_ranks s2 "0" "${DATA[@]}" --steps 2 --timeout-ms 120000
cluster_ranks s2 "5" "${DATA[@]}" --steps 2 --gate "2:$T/gate-5" --timeout-ms 120000
wait_handed_over s2 2 "0 1 2 3 4"

log "kill -9 the leader (node 0)"
ckptd_kill9 n0
for r in 2 3 4; do
	for i in $(seq 1 300); do
		kill -0 "${CRANK_PID[$r]}" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "${CRANK_PID[$r]}" 2>/dev/null &&
		fail "rank $r (node $(node_of $r)) has no outcome for step 2 30 s after the leader died"
	rank_wait "${CRANK_PID[$r]}" "s2-$r"
	grep -q "rank $r step 2 FAILED.*node 0 lost" "$T/s2-$r.log" ||
		fail "rank $r was not told that the leader was lost: $(grep 'step 2' "$T/s2-$r.log")"
done
kill -9 "${CRANK_PID[0]}" "${CRANK_PID[1]}" "${CRANK_PID[5]}" 2>/dev/null
wait "${CRANK_PID[0]}" "${CRANK_PID[1]}" "${CRANK_PID[5]}" 2>/dev/null
ckptd_alive n1 || fail "node 1's daemon died with the leader"
ckptd_alive n2 || fail "node 2's daemon died with the leader"
wait_metric 1 ckpt_peer_up node=0 -eq 0 15
no_manifest_for "$JOB" 2 2

log "without a leader: a save fails at once, restores of step 1 still work"
cluster_ranks s3 "2" "${DATA[@]}" --steps 3 --expect-fail 3 --timeout-ms 60000
cluster_wait s3 "2"
grep -q "rank 2 step 3 FAILED.*leader" "$T/s3-2.log" || fail "rank 2's save without a leader: $(cat "$T/s3-2.log")"
cluster_ranks r1 "2 3 4 5" "${DATA[@]}" --restore latest --expect-step 1 --timeout-ms 60000
cluster_wait r1 "2 3 4 5"

log "a fresh node 0: the group commits again"
node_start 0
cluster_wait_whole 30
run_cluster_ranks s4 "${DATA[@]}" --steps 4 --wait --timeout-ms 120000
expect_committed "$JOB" "1 4"
expect_latest "$JOB" 4
verify "$JOB" 4
[ -e "$(stepdir "$JOB" 2)/MANIFEST.json" ] && fail "step 2 got a manifest after all"
[ -e "$(stepdir "$JOB" 3)/MANIFEST.json" ] && fail "step 3 got a manifest after all"

for k in 2 1 0; do
	ckptd_stop n$k
done
log "pass"
