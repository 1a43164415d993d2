#!/bin/bash
# SPDX-License-Identifier: MIT
# Outcomes the peer link drops: the leader runs with the test-only fault
# CKPTD_TEST_FAULT=drop-outcomes, so it never sends its COMMITTED or ABORT
# broadcasts. The other node must still learn each outcome within a bounded
# time (it asks again with its votes after peer_timeout_ms) and its ranks'
# ckpt_wait must end: COMMITTED for a committed step, FAILED for one that
# failed on the leader (a rank of node 0 dies without saving), and FAILED
# with a reason for one that a connected rank never saves (the leader's
# step_timeout_ms ends it: every wait ends).
NODES=2
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-cluster.sh"

JOB=$ROOT/od
DATA=(--job od --seed 33 --tensors 4 --min-bytes 64K --max-bytes 2M)

CKPTD_TEST_FAULT=drop-outcomes node_start 0 --step-timeout-ms 3000
node_start 1
cluster_wait_whole 30
grep -q "TEST FAULT INJECTION ENABLED: CKPTD_TEST_FAULT=drop-outcomes" "$T/ckptd-n0.log" ||
	fail "node 0 does not implement CKPTD_TEST_FAULT=drop-outcomes: no message can be dropped"

log "step 1: committed, COMMITTED never sent; node 1's ranks must still hear it"
start=$(date +%s)
run_cluster_ranks s1 "${DATA[@]}" --steps 1 --wait --timeout-ms 30000
for r in 0 1 2 3; do
	grep -q "rank $r step 1 committed" "$T/s1-$r.log" || fail "rank $r: $(cat "$T/s1-$r.log")"
done
grep -q "TEST FAULT: COMMITTED job=od step=1 not sent" "$T/ckptd-n0.log" ||
	fail "the leader sent COMMITTED for step 1 after all"
grep -q "votes sent again job=od step=1" "$T/ckptd-n1.log" ||
	fail "node 1 did not ask again for step 1's outcome"
secs=$(($(date +%s) - start))
[ "$secs" -le 20 ] || fail "node 1 took $secs s to learn step 1's outcome"
expect_committed "$JOB" 1

log "step 2: rank 0 dies without saving it, ABORT never sent; node 1's ranks must hear FAILED"
cluster_ranks s2 "1 2 3" "${DATA[@]}" --steps 2 --wait --expect-fail 2 --timeout-ms 30000
for i in $(seq 1 300); do
	n=$(cat "$T/ckptd-n0.log" "$T/ckptd-n1.log" | grep -c "durable job=od step=2 rank=")
	[ "$n" -ge 3 ] && break
	sleep 0.1
done
[ "$n" -ge 3 ] || fail "ranks 1, 2 and 3 did not make step 2 durable within 30 s"
cluster_ranks s2 "0" "${DATA[@]}" --steps 2 --die-in-step 2 --die-when copy --timeout-ms 30000
cluster_wait s2 "1 2 3"
for r in 2 3; do
	grep -q "rank $r step 2 FAILED" "$T/s2-$r.log" || fail "rank $r: $(cat "$T/s2-$r.log")"
done
grep -q "TEST FAULT: ABORT job=od step=2 not sent" "$T/ckptd-n0.log" ||
	fail "the leader sent ABORT for step 2 after all"
[ -e "$(stepdir "$JOB" 2)/MANIFEST.json" ] && fail "step 2 has a manifest"

log "step 3: rank 1 stays connected and never saves it; the leader's step timeout ends it"
cluster_ranks s3 "1" "${DATA[@]}" --steps 3 --gate "3:$T/never" --timeout-ms 60000
cluster_ranks s3 "0 2 3" "${DATA[@]}" --steps 3 --wait --expect-fail 3 --timeout-ms 30000
start=$(date +%s)
cluster_wait s3 "0 2 3"
secs=$(($(date +%s) - start))
for r in 0 2 3; do
	grep -q "rank $r step 3 FAILED.*no vote for step 3 within step_timeout_ms=3000: 1 rank(s) never saved it (1)" \
		"$T/s3-$r.log" || fail "rank $r: $(cat "$T/s3-$r.log")"
done
[ "$secs" -le 20 ] || fail "step 3 took $secs s to end"
kill -9 "${CRANK_PID[1]}" 2>/dev/null
wait "${CRANK_PID[1]}" 2>/dev/null
ckptd_stop n1
ckptd_stop n0
log "pass"
