#!/bin/bash
# SPDX-License-Identifier: MIT
# An ABORT only ever concerns an open step: authenticated ABORTs (sent by
# ckpt-peer-forge with the group's key) for committed steps, and for a
# step that is neither open nor committed but older than the newest
# committed one, change nothing: no step fails, no step directory goes,
# LATEST stays, and later saves commit.
NODES=2
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lib-cluster.sh"

: "${CKPT_PEER_FORGE:?CKPT_PEER_FORGE must name the ckpt-peer-forge binary}"
JOB=$ROOT/ab
DATA=(--job ab --seed 6 --tensors 4 --min-bytes 4K --max-bytes 1M)

forge() {
	echo "+ forge $*" >>"$T/forge.log"
	"$CKPT_PEER_FORGE" --dir "$RENDEZVOUS" --nodes "$NODES" --cluster-id "$CLUSTER_ID" "$@" \
		>>"$T/forge.log" 2>&1 || fail "ckpt-peer-forge $* exited $? (see forge.log)"
}
failed_saves() { metric "$1" ckpt_saves_total outcome=failed; }

cluster_start
log "steps 1 and 3 commit; rank 0 stays connected (waits before a step 9 it never saves)"
cluster_ranks s "1 2 3" "${DATA[@]}" --steps 1,3 --wait --timeout-ms 30000
cluster_ranks s "0" "${DATA[@]}" --steps 1,3,9 --wait --gate "9:$T/never" --timeout-ms 60000
cluster_wait s "1 2 3"
for i in $(seq 1 100); do
	[ -e "$(stepdir "$JOB" 3)/MANIFEST.json" ] && break
	sleep 0.1
done
expect_committed "$JOB" "1 3"
expect_latest "$JOB" 3
f0=$(failed_saves 0)
f1=$(failed_saves 1)

log "ABORTs from node 1 to the leader: for committed steps 1 and 3, for unknown step 2"
forge --to 0 --from 1 --type abort --job ab --step 3 --world 4 --status -125 --reason forged
forge --to 0 --from 1 --type abort --job ab --step 1 --world 4 --status -125 --reason forged
forge --to 0 --from 1 --type abort --job ab --step 2 --world 4 --status -125 --reason forged
log "ABORT from the leader to node 1 for committed step 3"
forge --to 1 --from 0 --type abort --job ab --step 3 --world 4 --status -125 --reason forged
sleep 2
for k in 0 1; do
	ckptd_alive n$k || fail "node $k's daemon died"
	[ "$(failed_saves $k)" = "$(eval echo \$f$k)" ] ||
		fail "node $k counts a failed save after ABORTs for steps that are not open ($(eval echo \$f$k) -> $(failed_saves $k))"
	grep -E "step abandoned job=ab step=(1|2|3) " "$T/ckptd-n$k.log" &&
		fail "node $k abandoned a step that was not open: $(grep -E 'step abandoned job=ab' "$T/ckptd-n$k.log")"
done
grep -q "ABORT ignored job=ab step=2 node=1" "$T/ckptd-n0.log" ||
	fail "the leader does not say it ignored the ABORT for step 2"
expect_committed "$JOB" "1 3"
expect_latest "$JOB" 3
verify "$JOB" 1
verify "$JOB" 3

log "a new run of the job commits step 9"
kill -9 "${CRANK_PID[0]}" 2>/dev/null
wait "${CRANK_PID[0]}" 2>/dev/null
run_cluster_ranks t "${DATA[@]}" --steps 9 --wait --timeout-ms 30000
expect_committed "$JOB" "1 3 9"
ckptd_stop n1
ckptd_stop n0
log "pass"
