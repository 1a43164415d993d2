#!/bin/bash
# SPDX-License-Identifier: MIT
# kill -9 of one node's daemon while a step is in flight on every node: the
# step never gets a manifest; the ranks on the other nodes are told it
# failed within a few peer timeouts (they do not hang); their daemons keep
# serving restores of the step before; once the killed daemon is back, the
# group is whole again and a later step commits with all 6 ranks.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-cluster.sh"

JOB=$ROOT/kd
# Up to ~100 MiB per rank: the shards are still being written when node 1
# goes away.
DATA=(--job kd --seed 11 --tensors 8 --min-bytes 256K --max-bytes 32M --blob-bytes 4321)

cluster_start

log "step 1 commits on all 6 ranks"
run_cluster_ranks s1 "${DATA[@]}" --steps 1 --wait --timeout-ms 120000
expect_committed "$JOB" 1

# Step 2: every rank but 3 saves it; rank 3 (node 1) waits at a gate, so
# the step cannot commit before node 1's daemon is gone.
log "step 2 in flight on every node; rank 3 held back"
cluster_ranks s2 "0 1 4 5" "${DATA[@]}" --steps 2 --expect-fail 2 --timeout-ms 120000
cluster_ranks s2 "2" "${DATA[@]}" --steps 2 --timeout-ms 120000
cluster_ranks s2 "3" "${DATA[@]}" --steps 2 --gate "2:$T/gate-3" --timeout-ms 120000
wait_handed_over s2 2 "0 1 2 4 5" "0 1 4 5"
[ -e "$(stepdir "$JOB" 2)/MANIFEST.json" ] && fail "step 2 committed without rank 3"

log "kill -9 node 1's daemon"
ckptd_kill9 n1
t0=$(date +%s%N)

# The ranks on nodes 0 and 2 get FAILED (--expect-fail 2 makes that exit
# 0): within the peer timeout (2 s) plus slack, never a hang.
for r in 0 1 4 5; do
	for i in $(seq 1 300); do
		kill -0 "${CRANK_PID[$r]}" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "${CRANK_PID[$r]}" 2>/dev/null &&
		fail "rank $r (node $(node_of $r)) still has no outcome for step 2 30 s after node 1's daemon died"
	rank_wait "${CRANK_PID[$r]}" "s2-$r"
	grep -q "rank $r step 2 FAILED" "$T/s2-$r.log" || fail "rank $r did not report step 2 failed"
done
log "ranks of nodes 0 and 2 saw step 2 fail after $((($(date +%s%N) - t0) / 1000000)) ms"
grep -h "step 2 FAILED" "$T"/s2-[0145].log | head -n 4
# Node 1's ranks lost their daemon; their outcome is not this test's point.
kill -9 "${CRANK_PID[2]}" "${CRANK_PID[3]}" 2>/dev/null
wait "${CRANK_PID[2]}" "${CRANK_PID[3]}" 2>/dev/null

ckptd_alive n0 || fail "node 0's daemon died with node 1's"
ckptd_alive n2 || fail "node 2's daemon died with node 1's"
wait_metric 0 ckpt_peer_up node=1 -eq 0 15
wait_metric 2 ckpt_peer_up node=1 -eq 0 15
no_manifest_for "$JOB" 2 2
expect_latest "$JOB" 1

log "nodes 0 and 2 still serve restores of step 1"
cluster_ranks r1 "0 1 4 5" "${DATA[@]}" --restore latest --expect-step 1 --timeout-ms 60000
cluster_wait r1 "0 1 4 5"
cluster_ranks r1b "0 5" "${DATA[@]}" --restore 1 --expect-step 1 --timeout-ms 60000
cluster_wait r1b "0 5"
# Several peer timeouts after node 1 died, the survivors still see each
# other: a dead node takes only its own link down.
[ "$(metric 0 ckpt_peer_up node=2)" = 1 ] || fail "node 0 lost node 2 when node 1 died"
[ "$(metric 2 ckpt_peer_up node=0)" = 1 ] || fail "node 2 lost node 0 when node 1 died"
for r in 4 5; do
	grep -q "node 0 lost" "$T/s2-$r.log" && fail "rank $r was told node 0 was lost: $(grep 'step 2' "$T/s2-$r.log")"
done

log "restart node 1's daemon"
node_start 1
cluster_wait_whole 30
run_cluster_ranks s3 "${DATA[@]}" --steps 3 --wait --timeout-ms 120000
for r in 0 1 2 3 4 5; do
	grep_log "s3-$r" "rank $r step 3 committed" || fail "rank $r did not report step 3 committed"
done
expect_committed "$JOB" "1 3"
expect_latest "$JOB" 3
verify "$JOB" 1
verify "$JOB" 3
run_cluster_ranks r3 "${DATA[@]}" --restore latest --expect-step 3 --timeout-ms 60000
[ -e "$(stepdir "$JOB" 2)/MANIFEST.json" ] && fail "step 2 got a manifest after all"

for k in 2 1 0; do
	ckptd_stop n$k
done
log "pass"
