#!/bin/bash
# SPDX-License-Identifier: MIT
# The leader dies between writing a step's manifest and telling the other
# nodes (an LD_PRELOAD shim kills it with SIGKILL right after the rename of
# MANIFEST.json). The step is committed: the other node, once it gives the
# leader up for lost, must find the manifest on the shared root and tell
# its ranks COMMITTED, not FAILED. A fresh leader then sees the step
# committed, LATEST names it and it verifies.
NODES=2
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-cluster.sh"

: "${CKPT_CRASH_SHIM:?CKPT_CRASH_SHIM must name the crash-after-manifest shim}"
JOB=$ROOT/lc
DATA=(--job lc --seed 21 --tensors 4 --min-bytes 64K --max-bytes 2M)

# ASan wants its runtime first among the libraries; the shim comes first.
LD_PRELOAD=$CKPT_CRASH_SHIM ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
	node_start 0
node_start 1
cluster_wait_whole 30

log "step 1 on all 4 ranks; the leader dies right after its manifest"
cluster_ranks s1 "0 1" "${DATA[@]}" --steps 1 --wait --timeout-ms 60000
cluster_ranks s1 "2 3" "${DATA[@]}" --steps 1 --wait --timeout-ms 60000
for i in $(seq 1 300); do
	ckptd_alive n0 || break
	sleep 0.1
done
ckptd_alive n0 && fail "the leader did not die at its manifest"
grep -q "crash-after-manifest: MANIFEST.json in place" "$T/ckptd-n0.log" ||
	fail "the leader died, but not at its manifest"
[ -f "$(stepdir "$JOB" 1)/MANIFEST.json" ] || fail "no manifest for step 1 on the root"

log "node 1's ranks must hear COMMITTED"
cluster_wait s1 "2 3"
for r in 2 3; do
	grep -q "rank $r step 1 committed" "$T/s1-$r.log" ||
		fail "rank $r (node 1) was not told step 1 committed: $(grep 'step 1' "$T/s1-$r.log")"
done
grep -q "manifest found on the root" "$T/ckptd-n1.log" ||
	fail "node 1 does not say it found the manifest on the root"
kill -9 "${CRANK_PID[0]}" "${CRANK_PID[1]}" 2>/dev/null
wait "${CRANK_PID[0]}" "${CRANK_PID[1]}" 2>/dev/null

log "a fresh leader: step 1 is committed, step 2 commits"
node_start 0
cluster_wait_whole 30
run_cluster_ranks s2 "${DATA[@]}" --steps 2 --wait --timeout-ms 60000
expect_committed "$JOB" "1 2"
expect_latest "$JOB" 2
verify "$JOB" 1
verify "$JOB" 2
ckptd_stop n1
ckptd_stop n0
log "pass"
